package rls

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit/internal/route"
)

// File is one configuration file: its name, used in errors and in the
// version, and its contents.
type File struct {
	Name string
	Data []byte
}

// Config is a validated set of domains, ready for Match. It is immutable
// and safe for concurrent use.
type Config struct {
	version  string
	domains  map[string]*node
	names    []string // sorted
	warnings []string
}

// node is one descriptor of the configuration (or a domain's root).
type node struct {
	// children by composite key: key, or key + "_" + value.
	children map[string]*node
	// wildcards are the children whose composite key ends in '*', in the
	// file's order: the first whose prefix fits wins.
	wildcards []wildcard
	// rule is the descriptor's rate_limit; nil when it has none.
	rule *Rule

	// Accepted, checked and recorded; ringlimit does not act on them.
	quotaMode, valueToMetric, shareThreshold bool
}

type wildcard struct {
	prefix string // the composite key without its '*'
	node   *node
}

// Version identifies the files the Config was parsed from: 12 hex digits
// of a SHA-256 of their base names and contents, in order. The same files
// give the same version on every run and every node, whatever the path
// they were read by (relative or absolute, another mount point).
func (c *Config) Version() string { return c.version }

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string { return slices.Clone(c.names) }

// Warnings lists what the files set that ringlimit accepts and ignores
// (quota_mode, value_to_metric, share_threshold, keys out of place), each
// as "file:line: ...".
func (c *Config) Warnings() []string { return slices.Clone(c.warnings) }

// version hashes the files' base names and contents, each
// length-prefixed.
func version(files []File) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		for _, b := range [][]byte{[]byte(filepath.Base(f.Name)), f.Data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Parse reads and validates files, each one YAML document for one domain.
// Errors name the file and line; on error nothing is returned.
func Parse(files []File) (*Config, error) {
	c := &Config{version: version(files), domains: map[string]*node{}}
	from := map[string]string{} // domain → the file that defined it
	for _, f := range files {
		p := &parser{file: f.Name}
		domain, at, root, err := p.parseFile(f.Data)
		if err != nil {
			return nil, err
		}
		if first, dup := from[domain]; dup {
			return nil, p.errorf(at, "duplicate domain %q in config file (first in %s)", domain, first)
		}
		from[domain] = f.Name
		c.domains[domain] = root
		c.names = append(c.names, domain)
		c.warnings = append(c.warnings, p.warnings...)
	}
	slices.Sort(c.names)
	return c, nil
}

// parseFile reads one file: its domain, the node that names it (for its
// line) and the tree of its descriptors.
func (p *parser) parseFile(data []byte) (domain string, at *yaml.Node, root *node, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return "", nil, nil, fmt.Errorf("rls: %s: %w", p.file, err)
	}
	var more yaml.Node
	switch err := dec.Decode(&more); {
	case err == nil && !isNull(resolve(&more)):
		return "", nil, nil, p.errorf(resolve(&more), "a second YAML document; a file holds one domain")
	case err != nil && !errors.Is(err, io.EOF):
		return "", nil, nil, fmt.Errorf("rls: %s: %w", p.file, err)
	}
	top := resolve(&doc)
	if top.Kind == 0 || isNull(top) {
		// An empty file: no domain.
		top = &yaml.Node{Kind: yaml.MappingNode, Line: max(top.Line, 1)}
	}
	pairs, err := p.mapping(top, "the file")
	if err != nil {
		return "", nil, nil, err
	}
	at, root = top, &node{}
	var descriptors *pair
	for i, kv := range pairs {
		switch kv.k.Value {
		case "domain":
			at = kv.v
			domain, err = p.str(kv)
		case "descriptors":
			descriptors = &pairs[i]
		default:
			err = p.misplaced(kv)
		}
		if err != nil {
			return "", nil, nil, err
		}
	}
	if domain == "" {
		return "", nil, nil, p.errorf(at, "config file cannot have empty domain")
	}
	if descriptors != nil {
		if err := p.descriptors(*descriptors, root, domain+"."); err != nil {
			return "", nil, nil, err
		}
	}
	return domain, at, root, nil
}

// descriptors reads a list of descriptors into parent. prefix is the
// statistics name of parent, with its trailing dot.
func (p *parser) descriptors(kv pair, parent *node, prefix string) error {
	items, err := p.sequence(kv)
	if err != nil {
		return err
	}
	for _, item := range items {
		if err := p.descriptor(resolve(item), parent, prefix); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) descriptor(item *yaml.Node, parent *node, prefix string) error {
	if err := p.enter(item); err != nil {
		return err
	}
	defer p.leave()
	pairs, err := p.mapping(item, "a descriptor")
	if err != nil {
		return err
	}
	n := &node{}
	keyNode := item
	var key, value string
	var rateLimit, children, calendarTZ *pair
	var shadow, detailed bool
	var tz string
	for i, kv := range pairs {
		switch kv.k.Value {
		case "calendar_timezone":
			calendarTZ = &pairs[i]
			tz, err = p.str(kv)
		case "key":
			keyNode = kv.v
			key, err = p.str(kv)
		case "value":
			value, err = p.str(kv)
		case "rate_limit":
			rateLimit = &pairs[i]
		case "descriptors":
			children = &pairs[i]
		case "shadow_mode":
			shadow, err = p.boolean(kv)
		case "detailed_metric":
			detailed, err = p.boolean(kv)
		case "quota_mode":
			n.quotaMode, err = p.ignored(kv)
		case "value_to_metric":
			n.valueToMetric, err = p.ignored(kv)
		case "share_threshold":
			n.shareThreshold, err = p.ignored(kv)
		default:
			err = p.misplaced(kv)
		}
		if err != nil {
			return err
		}
	}
	if key == "" {
		return p.errorf(keyNode, "descriptor has empty key")
	}
	if isRoute(key, value) && !strings.HasSuffix(value, "*") {
		// Requests' routes are normalised before they are matched.
		if norm := route.Normalize(value); norm != value {
			p.warnf(keyNode, "value %q is a route: it matches requests for %q, its normalised form", value, norm)
			value = norm
		}
	}
	composite := key
	if value != "" {
		composite += "_" + value
	}
	full := prefix + composite
	if _, dup := parent.children[composite]; dup {
		return p.errorf(keyNode, "duplicate descriptor composite key %q", full)
	}
	if calendarTZ != nil && (rateLimit == nil || isNull(rateLimit.v)) {
		return p.errorf(calendarTZ.k, "calendar_timezone aligns the descriptor's rate_limit to a calendar, and it has none")
	}
	if rateLimit != nil && !isNull(rateLimit.v) {
		if n.rule, err = p.rateLimit(*rateLimit, full, shadow, detailed, calendarTZ, tz); err != nil {
			return err
		}
	}
	wild := strings.HasSuffix(composite, "*")
	if n.shareThreshold && !wild {
		return p.errorf(keyNode, "share_threshold can only be used with wildcard values (ending with '*'), but found key %q", composite)
	}
	if parent.children == nil {
		parent.children = map[string]*node{}
	}
	parent.children[composite] = n
	if wild {
		parent.wildcards = append(parent.wildcards, wildcard{prefix: composite[:len(composite)-1], node: n})
	}
	if children != nil {
		return p.descriptors(*children, n, full+".")
	}
	return nil
}

// ignored reads a boolean ringlimit accepts but does not act on.
func (p *parser) ignored(kv pair) (bool, error) {
	b, err := p.boolean(kv)
	if b {
		p.warnf(kv.k, "%s is accepted and ignored by ringlimit", kv.k.Value)
	}
	return b, err
}
