package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

var writeScreenshot = flag.Bool("ui.screenshot", false, "TestStatusPageInBrowser: write the page, three nodes alive under a little traffic, to ../../docs/status-page.png")

// chromium returns the browser the status page tests drive: Debian's
// /usr/bin/chromium, else chromium or chromium-browser on the PATH.
func chromium() (string, error) {
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium", nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("neither /usr/bin/chromium nor chromium or chromium-browser on the PATH")
}

// pageView is what the status page shows, read from its DOM.
type pageView struct {
	Location  string            `json:"location"`
	Members   map[string]string `json:"members"` // name → state
	Slices    int               `json:"slices"`
	Owners    []string          `json:"owners"` // distinct data-owner of the slices, sorted
	Fills     int               `json:"fills"`  // distinct fill colours of the slices
	Legend    []string          `json:"legend"`
	Slice0    string            `json:"slice0"`  // partition 0's path
	Rates     map[string]string `json:"rates"`   // name → checks/s cell
	Refused   map[string]string `json:"refused"` // name → refused cell
	Ops       map[string]string `json:"ops"`     // name → other operations cell
	Freshness string            `json:"freshness"`
	// CSP lists what the Content-Security-Policy blocked.
	CSP []string `json:"csp"`
}

const readPage = `(() => {
  const v = {location: location.href, members: {}, rates: {}, refused: {}, ops: {}, legend: [], owners: [], slices: 0, fills: 0, slice0: '',
    freshness: (document.getElementById('freshness') || {}).dataset?.state || '',
    csp: window.ringlimitCSPViolations || ['app.js did not run']};
  for (const tr of document.querySelectorAll('#members tbody tr')) {
    v.members[tr.dataset.name] = tr.querySelector('.state').textContent;
    v.rates[tr.dataset.name] = tr.children[5].textContent;
    v.refused[tr.dataset.name] = tr.children[6].textContent;
    v.ops[tr.dataset.name] = tr.querySelector('.ops').textContent;
  }
  const slices = document.querySelectorAll('svg#ring path.slice');
  v.slices = slices.length;
  v.owners = [...new Set([...slices].map(p => p.getAttribute('data-owner')))].sort();
  v.fills = new Set([...slices].map(p => p.getAttribute('fill'))).size;
  v.slice0 = slices.length ? slices[0].getAttribute('d') : '';
  v.legend = [...document.querySelectorAll('#legend li')].map(li => li.dataset.name);
  return v;
})()`

// TestStatusPageInBrowser opens node-1's / in headless Chromium with three
// node processes under a little traffic: the page lands on /ui/, lists the
// three members alive, draws the 1,021 partitions in three owners'
// colours, and shows rates and refusals; the Content-Security-Policy
// blocks nothing; node-1's other operations are the 3 peeks, 2 reserves
// and 1 settle sent to it. After node-3 is killed (SIGKILL) the page shows
// it dead within 5 s.
func TestStatusPageInBrowser(t *testing.T) {
	needChromium(t)
	bin := buildNode(t)
	h := newHarness(t)
	all := startThree(t, h, bin, nil)
	p1, p3 := all[0], all[2]

	// A little traffic through node-1 and node-2 (not node-3, which dies):
	// about 80 checks a second on 20 keys limited to 2 per second each, so
	// that about half are refused once the bursts are spent.
	stop := make(chan struct{})
	var load sync.WaitGroup
	t.Cleanup(func() { close(stop); load.Wait() })
	l := inlineLimit{count: 2, per: "1s"}
	for w, p := range all[:2] {
		load.Go(func() {
			tick := time.NewTicker(25 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				doCheck(h.client, p.http, fmt.Sprintf("user:%d", (2*i+w)%20), l, 2*time.Second)
			}
		})
	}

	// Other operations through node-1: 3 peeks, 2 reserves, 1 settle.
	ops := inlineLimit{count: 100, per: "1h"}
	var reservation string
	for i, body := range []string{`"peek":true`, `"peek":true`, `"peek":true`, `"reserve":true`, `"reserve":true`} {
		status, b, err := postJSON(h.client, "http://"+p1.http+"/v1/check", strings.Replace(checkBody("ops", ops), `"cost":1`, `"cost":1,`+body, 1))
		var a api.CheckResponse
		if err == nil {
			err = json.Unmarshal(b, &a)
		}
		if err != nil || status != http.StatusOK || a.Allowed != true || (i >= 3) != (a.Reservation != "") {
			t.Fatalf("operation %d (%s): %d %s %v", i, body, status, b, err)
		}
		reservation = a.Reservation
	}
	if status, b, err := postJSON(h.client, "http://"+p1.http+"/v1/settle", fmt.Sprintf(`{"reservation":%q,"cost":0}`, reservation)); err != nil || status != http.StatusOK {
		t.Fatalf("settle: %d %s %v", status, b, err)
	}
	const wantOps = "peek 3 · reserve 2 · settle 1 · reset 0"

	dir := t.ArtifactDir()
	bctx := newBrowser(t)
	run := func(d time.Duration, a chromedp.Action[pageView]) (pageView, error) {
		ctx, cancel := context.WithTimeout(bctx, d)
		defer cancel()
		return chromedp.Run(ctx, a)
	}
	shot := func(name string) []byte {
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		return png
	}
	{
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		err := chromedp.Do(ctx, chromedp.Navigate("http://"+p1.http+"/"))
		cancel()
		if err != nil {
			t.Fatalf("open http://%s/: %v", p1.http, err)
		}
	}
	// slice0 is partition 0 of 1,021: the annulus of radii 150 and 95
	// around (160, 160) from 0 to 360/1021 degrees clockwise from the top.
	const slice0 = "M160.00 10.00 A150 150 0 0 1 160.92 10.00 L160.58 65.00 A95 95 0 0 0 160.00 65.00 Z"
	var v pageView
	testkit.WaitFor(t, 10*time.Second, "the page to show three members alive, the ring and rates", func() error {
		var err error
		if v, err = run(2*time.Second, chromedp.Evaluate[pageView](readPage)); err != nil {
			return err
		}
		switch {
		case v.Location != "http://"+p1.http+"/ui/":
			return fmt.Errorf("at %s", v.Location)
		case len(v.Members) != 3 || v.Members["node-1"] != "alive" || v.Members["node-2"] != "alive" || v.Members["node-3"] != "alive":
			return fmt.Errorf("members %v", v.Members)
		case v.Slices != 1021 || !slices.Equal(v.Owners, names3) || v.Fills != 3:
			return fmt.Errorf("%d slices owned by %v in %d colours", v.Slices, v.Owners, v.Fills)
		case !slices.Equal(v.Legend, names3):
			return fmt.Errorf("legend %v", v.Legend)
		case v.Rates["node-1"] == "—" || v.Rates["node-1"] == "0.0" || v.Rates["node-2"] == "—":
			return fmt.Errorf("checks/s %v", v.Rates)
		case v.Refused["node-1"] == "—" || v.Refused["node-1"] == "0.0%":
			return fmt.Errorf("refused %v", v.Refused)
		case v.Ops["node-1"] != wantOps || v.Ops["node-2"] != "peek 0 · reserve 0 · settle 0 · reset 0":
			return fmt.Errorf("other operations %v, want node-1's %q", v.Ops, wantOps)
		}
		return nil
	})
	if v.Slice0 != slice0 {
		t.Errorf("partition 0's slice: %q, want %q", v.Slice0, slice0)
	}
	before := shot("status-before.png")
	if *writeScreenshot {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "status-page.png"), before, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	killed := time.Now()
	if err := p3.kill(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the page to show node-3 dead", func() error {
		var err error
		if v, err = run(time.Second, chromedp.Evaluate[pageView](readPage)); err != nil {
			return err
		}
		if v.Members["node-3"] != "dead" || v.Members["node-1"] != "alive" || v.Members["node-2"] != "alive" {
			return fmt.Errorf("members %v", v.Members)
		}
		return nil
	})
	t.Logf("the page showed node-3 dead %v after SIGKILL", time.Since(killed).Round(10*time.Millisecond))
	testkit.WaitFor(t, 5*time.Second, "the ring without node-3", func() error {
		var err error
		if v, err = run(time.Second, chromedp.Evaluate[pageView](readPage)); err != nil {
			return err
		}
		if want := names3[:2]; v.Slices != 1021 || !slices.Equal(v.Owners, want) || v.Fills != 2 {
			return fmt.Errorf("%d slices owned by %v in %d colours", v.Slices, v.Owners, v.Fills)
		}
		return nil
	})
	if len(v.CSP) != 0 {
		t.Errorf("the Content-Security-Policy blocked %v", v.CSP)
	}
	if v.Freshness != "fresh" {
		t.Errorf("freshness %q after node-3 died, want fresh: node-1 answers", v.Freshness)
	}
	shot("status-after.png")
	t.Logf("screenshots in %s", dir)
}

// needChromium skips the test when there is no Chromium, unless CI is
// "true": then it fails.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := chromium(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Chromium is required under CI: %v", err)
		}
		t.Skipf("no Chromium: %v", err)
	}
}

// newBrowser starts headless Chromium with a profile of its own, stopped
// when the test ends, and returns the context of its tab. Call it after
// newHarness, so that the browser is gone when goleak looks.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	needChromium(t)
	bin, _ := chromium()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin), chromedp.Flag("disable-dev-shm-usage", true), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1100))
	t.Cleanup(cancelAlloc) // waits for the browser to exit
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	// The first action starts the browser: it gets no deadline of its own.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return bctx
}

// TestStatusPagePrivateReadsInBrowser: on a node with --private-reads the
// page asks for the admin token; once given (kept in sessionStorage) it
// shows the node, its policy version and the override in force.
func TestStatusPagePrivateReadsInBrowser(t *testing.T) {
	needChromium(t)
	h := newHarness(t)
	bctx := newBrowser(t)
	dir := t.TempDir()
	pol, tokens := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "tokens")
	writePolicy(t, pol, overridePolicy)
	if err := os.WriteFile(tokens, []byte("oncall:"+testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, _ := h.startWith("node-1", []string{"--policy", pol, "--audit-log", filepath.Join(dir, "audit"), "--admin-token-file", tokens, "--private-reads"}, nil)
	addr := httpAddr(n)
	status, b, err := postJSON(h.client, "http://"+addr+"/v1/overrides", `{"actor":"oncall","reason":"incident 7","user":"42","tier":"enterprise","expires_in":"10m"}`)
	if err != nil || status != 200 {
		t.Fatalf("POST /v1/overrides: %d %s %v", status, b, err)
	}
	const read = `(() => ({auth: !document.getElementById('auth').hidden, freshness: document.getElementById('freshness').dataset.state,
  members: [...document.querySelectorAll('#members tbody tr')].map(tr => tr.dataset.name + '=' + tr.dataset.state),
  overrides: [...document.querySelectorAll('#overrides tbody tr')].map(tr => tr.children[1].textContent + ' ' + tr.children[4].textContent),
  policy: document.querySelector('#members tbody tr td:nth-child(13)')?.title || ''}))()`
	type view struct {
		Auth      bool     `json:"auth"`
		Freshness string   `json:"freshness"`
		Members   []string `json:"members"`
		Overrides []string `json:"overrides"`
		Policy    string   `json:"policy"`
	}
	look := func() (view, error) {
		ctx, cancel := context.WithTimeout(bctx, time.Second)
		defer cancel()
		return chromedp.Run(ctx, chromedp.Evaluate[view](read))
	}
	do := func(what string, a ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, a...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	do("open the page", chromedp.Navigate("http://"+addr+"/"))
	testkit.WaitFor(t, 5*time.Second, "the page to ask for a token", func() error {
		v, err := look()
		if err == nil && (!v.Auth || v.Freshness != "error" || len(v.Members) != 0) {
			err = fmt.Errorf("%+v", v)
		}
		return err
	})
	do("give the token", chromedp.SendKeys(chromedp.CSS("#token"), testAdminToken), chromedp.Click(chromedp.CSS("#token-form button[type=submit]")))
	want := view{Freshness: "fresh", Members: []string{"node-1=alive"}, Overrides: []string{"policy=api user=42 tier=enterprise incident 7"},
		Policy: versionOf(t, overridePolicy)}
	testkit.WaitFor(t, 5*time.Second, "the page to show the node and its override", func() error {
		v, err := look()
		if err == nil && !reflect.DeepEqual(v, want) {
			err = fmt.Errorf("%+v, want %+v", v, want)
		}
		return err
	})
}
