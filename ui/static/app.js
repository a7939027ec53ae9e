// The status page: polls api/status every second and redraws. No inline
// script or style (the node's Content-Security-Policy forbids them), no
// other origin.
'use strict';

const POLL_MS = 1000;
const FETCH_TIMEOUT_MS = 3000;
const STALE_MS = 3000;
const TOKEN_KEY = 'ringlimit.adminToken';
const SVG_NS = 'http://www.w3.org/2000/svg';

// Whatever the Content-Security-Policy blocks is recorded here (and in the
// console), for whoever looks: the page itself should never trip it.
window.ringlimitCSPViolations = [];
document.addEventListener('securitypolicyviolation',
  ev => window.ringlimitCSPViolations.push(ev.violatedDirective + ' ' + ev.blockedURI));

// Ring geometry: an annulus centred in the 320×320 view box.
const CX = 160, CY = 160, R_OUT = 150, R_IN = 95;

const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2',
  '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

function colourAt(i) {
  if (i < PALETTE.length) return PALETTE[i];
  return 'hsl(' + Math.round((i * 137.508) % 360) + ', 55%, 55%)';
}

function fmt(x) { return x.toFixed(2); }

// slicePath is the SVG path of partition p of n: the part of the annulus
// between the angles p/n and (p+1)/n of a turn, clockwise from the top.
function slicePath(p, n) {
  const a0 = 2 * Math.PI * p / n, a1 = 2 * Math.PI * (p + 1) / n;
  const pt = (r, a) => fmt(CX + r * Math.sin(a)) + ' ' + fmt(CY - r * Math.cos(a));
  const large = a1 - a0 > Math.PI ? 1 : 0;
  return 'M' + pt(R_OUT, a0) + ' A' + R_OUT + ' ' + R_OUT + ' 0 ' + large + ' 1 ' + pt(R_OUT, a1) +
    ' L' + pt(R_IN, a1) + ' A' + R_IN + ' ' + R_IN + ' 0 ' + large + ' 0 ' + pt(R_IN, a0) + ' Z';
}

const state = {
  last: null,        // the last status received
  lastAt: 0,         // when (Date.now())
  ringKey: '',       // what the slices show: ring version and colours
  slicesFor: 0,      // how many slices are drawn
};

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c == null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function swatch(colour) {
  const s = el('span', { class: 'swatch' });
  s.style.background = colour; // CSSOM, not an inline style attribute: allowed by the CSP
  return s;
}

function pct(x) { return (100 * x).toFixed(1) + '%'; }
function rate(x) { return x < 10 ? x.toFixed(1) : Math.round(x).toLocaleString('en'); }
function short(v) { return v && v.length > 14 ? v.slice(0, 14) + '…' : (v || '—'); }

function duration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  if (d) return d + 'd' + h + 'h';
  if (h) return h + 'h' + m + 'm';
  if (m) return m + 'm' + (s % 60) + 's';
  return s + 's';
}

// colours gives every member a colour by its place among all the names
// known, sorted, so that a member keeps its colour when another dies.
function colours(st) {
  const names = new Set();
  for (const m of st.members) names.add(m.name);
  for (const m of st.ring.members) names.add(m.name);
  const out = new Map();
  [...names].sort().forEach((n, i) => out.set(n, colourAt(i)));
  return out;
}

function renderMembers(st, col) {
  const body = document.querySelector('#members tbody');
  const rows = [];
  for (const m of st.members) {
    const s = m.stats, r = m.rates;
    const addr = el('td', { class: 'addr' });
    for (const [k, v] of [['http', m.http], ['grpc', m.grpc], ['peer', m.peer], ['gossip', m.gossip]]) {
      if (v) addr.append(el('div', { text: k + ' ' + v }));
    }
    const num = (v, title) => el('td', title ? { class: 'num', title } : { class: 'num' }, v);
    const tr = el('tr', { 'data-name': m.name, 'data-state': m.state, class: 'row-' + m.state + (m.self ? ' self' : '') },
      el('td', {}, swatch(col.get(m.name) || '#999'), m.name + (m.self ? ' (this node)' : '')),
      el('td', {}, el('span', { class: 'state state-' + m.state, text: m.state })),
      el('td', { class: 'on-ring', text: m.on_ring ? 'yes' : 'no' }),
      addr,
      num(m.keys >= 0 ? m.keys.toLocaleString('en') : '—'),
      num(r ? rate(r.checks_per_s) : '—', s ? s.checks.toLocaleString('en') + ' checks in all' : ''),
      num(r ? pct(r.refusal_rate) : '—', s ? s.refused.toLocaleString('en') + ' refused in all' : ''),
      num(r ? pct(r.forwarded_share) : '—', s ? s.forwarded.toLocaleString('en') + ' forwarded in all' : ''),
      num(r ? rate(r.degraded_per_s) : '—', s ? s.degraded.toLocaleString('en') + ' degraded in all' : ''),
      num(r ? rate(r.peer_checks_per_s) : '—', s ? s.peer_checks.toLocaleString('en') + ' in all' : ''),
      num(s ? s.replication_lag_ms.toFixed(2) + ' ms' : '—', s ? s.replication_pending + ' pending' : ''),
      el('td', { class: 'ops', title: 'peeks, checks admitted with a reservation, settles and resets since the node started' },
        s ? ['peek', 'reserve', 'settle', 'reset'].map((k, i) => k + ' ' + (s[['peeks', 'reservations', 'settles', 'resets'][i]] || 0).toLocaleString('en')).join(' · ') : '—'),
      el('td', { title: s ? s.policy_version || '' : '' }, s ? short(s.policy_version) : '—'),
      el('td', { title: s ? s.rls_version || '' : '' }, s ? short(s.rls_version) : '—'),
      num(s ? duration(s.uptime_s) : '—'),
      el('td', {}, s ? s.version : '—'),
      el('td', { class: 'adaptive', title: 'the current limit of each adaptive scope whose keys the node owns (its most recently moved key)' },
        s && s.adaptive && s.adaptive.length ? s.adaptive.map((a) => a.scope + ' ' + a.limit.toLocaleString('en')).join(' · ') : '—'));
    rows.push(tr);
  }
  body.replaceChildren(...rows);
}

function renderRing(st, col) {
  const ring = st.ring, n = ring.owners.length;
  const g = document.getElementById('slices');
  if (state.slicesFor !== n) {
    const paths = [];
    for (let p = 0; p < n; p++) {
      const path = document.createElementNS(SVG_NS, 'path');
      path.setAttribute('d', slicePath(p, n));
      path.setAttribute('class', 'slice');
      path.setAttribute('data-partition', String(p));
      paths.push(path);
    }
    g.replaceChildren(...paths);
    state.slicesFor = n;
    state.ringKey = '';
  }
  const key = ring.ring_version + '|' + ring.members.map(m => m.name + '=' + col.get(m.name)).join(',');
  if (key !== state.ringKey) {
    const paths = g.children;
    for (let p = 0; p < n; p++) {
      const owner = ring.members[ring.owners[p]].name, c = col.get(owner);
      paths[p].setAttribute('data-owner', owner);
      paths[p].setAttribute('fill', c);
      paths[p].setAttribute('stroke', c); // hides the hairlines between slices
      paths[p].setAttribute('stroke-width', '0.6');
    }
    state.ringKey = key;
  }
  document.getElementById('ring-center').textContent = n ? n.toLocaleString('en') + ' partitions' : 'no ring yet';
  document.getElementById('ring-sub').textContent = 'version ' + st.ring_version;
  const items = ring.members.map(m => el('li', { 'data-name': m.name }, swatch(col.get(m.name)), m.name,
    el('span', { class: 'share', text: m.partitions.toLocaleString('en') + ' partitions · ' + pct(m.share) })));
  document.getElementById('legend').replaceChildren(...items);
}

function renderOverrides(st) {
  const none = document.getElementById('no-policy');
  const table = document.getElementById('overrides');
  none.hidden = st.policy !== null;
  table.hidden = st.policy === null;
  if (st.policy === null) return;
  const rows = st.policy.overrides.map(o => {
    const who = [['policy', o.policy], ['api_key', o.api_key], ['user', o.user], ['tier', o.tier]]
      .filter(([, v]) => v).map(([k, v]) => k + '=' + v).join(' ');
    const lim = o.limit ? o.limit.limit + ' per ' + o.limit.per + (o.limit.algorithm ? ' (' + o.limit.algorithm + ')' : '') : '—';
    return el('tr', { 'data-id': o.id }, el('td', { text: o.id }), el('td', { text: who }), el('td', { text: lim }),
      el('td', { text: o.actor }), el('td', { text: o.reason }), el('td', { text: new Date(o.expires).toLocaleString() }));
  });
  if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: '6', class: 'muted', text: 'none' })));
  table.querySelector('tbody').replaceChildren(...rows);
}

function renderCluster(st) {
  const alive = st.members.filter(m => m.state === 'alive').length;
  document.getElementById('self').textContent = st.self;
  document.getElementById('summary').textContent = alive + ' of ' + st.members.length + ' members alive · ring version ' +
    st.ring_version + ' · ' + (st.quorum.minority ? 'MINORITY' : 'majority') +
    (st.policy ? ' · policy ' + short(st.policy.version) : '');
  const facts = [
    ['this node', st.self],
    ['cluster size (quorum)', st.quorum.cluster_size + (st.quorum.minority ? ' — this node is in a minority' : '')],
    ['down', (st.quorum.down || []).join(', ') || 'none'],
    ['replication factor', st.replication.factor || 'off'],
    ['replication lag', st.replication.lag_ms.toFixed(2) + ' ms, ' + st.replication.pending + ' pending'],
    ['replicas held', st.replication.replicas.toLocaleString('en')],
    ['keys decided as successor', st.replication.successor_keys.toLocaleString('en')],
  ];
  const dl = document.getElementById('cluster');
  dl.replaceChildren(...facts.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })]));
}

function render(st) {
  const col = colours(st);
  renderCluster(st);
  renderMembers(st, col);
  renderRing(st, col);
  renderOverrides(st);
}

function showAuth(message) {
  document.getElementById('auth').hidden = false;
  document.getElementById('auth-message').textContent = message;
}

function freshness(text, kind) {
  const f = document.getElementById('freshness');
  f.textContent = text;
  f.dataset.state = kind;
}

async function poll() {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  try {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    const resp = await fetch('api/status', { headers, cache: 'no-store', signal: ctl.signal });
    if (resp.status === 401 || resp.status === 403) {
      let msg = 'This node requires an admin token to read its status.';
      try { msg = (await resp.json()).message || msg; } catch (e) { /* not JSON */ }
      showAuth(msg);
      freshness('not authorised (' + resp.status + ')', 'error');
      return;
    }
    if (!resp.ok) throw new Error('HTTP ' + resp.status);
    const st = await resp.json();
    document.getElementById('auth').hidden = true;
    state.last = st;
    state.lastAt = Date.now();
    render(st);
    freshness('updated ' + new Date(state.lastAt).toLocaleTimeString(), 'fresh');
  } catch (e) {
    const age = state.lastAt ? Math.round((Date.now() - state.lastAt) / 1000) + ' s ago' : 'never';
    freshness('this node does not answer (' + (e.name === 'AbortError' ? 'timeout' : e.message) + '); last update ' + age,
      state.lastAt && Date.now() - state.lastAt < STALE_MS ? 'fresh' : 'stale');
  } finally {
    clearTimeout(timer);
    setTimeout(poll, POLL_MS);
  }
}

function setup() {
  document.getElementById('token-form').addEventListener('submit', ev => {
    ev.preventDefault();
    const v = document.getElementById('token').value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    document.getElementById('token').value = '';
  });
  document.getElementById('forget-token').addEventListener('click', () => sessionStorage.removeItem(TOKEN_KEY));
  document.getElementById('ring').addEventListener('mouseover', ev => {
    const p = ev.target.getAttribute && ev.target.getAttribute('data-partition');
    if (p !== null && p !== undefined) {
      document.getElementById('partition').textContent = 'partition ' + p + ': ' + ev.target.getAttribute('data-owner');
    }
  });
  poll();
}

setup();
