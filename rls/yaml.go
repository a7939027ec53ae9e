package rls

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit/internal/suggest"
)

// validKeys are the mapping keys a file may use anywhere: the ones
// envoyproxy/ratelimit knows, and ringlimit's algorithm and calendar_timezone.
var validKeys = map[string]bool{
	"domain": true, "descriptors": true, "key": true, "value": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "name": true, "replaces": true,
	"shadow_mode": true, "quota_mode": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true,
	"algorithm": true, "calendar_timezone": true,
}

// blocks name each kind of mapping, by the what its reader passes to
// mapping, as a person knows it, with the keys it gives a meaning to: an
// unknown key is compared with these for a did-you-mean.
var blocks = map[string]struct {
	name   string
	fields []string
}{
	"the file":         {"the file", []string{"domain", "descriptors"}},
	"a descriptor":     {"descriptor", []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "quota_mode", "value_to_metric", "share_threshold", "calendar_timezone"}},
	"rate_limit":       {"rate_limit", []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm"}},
	"a replaces entry": {"replaces entry", []string{"name"}},
}

// envoyBootstrap holds the top-level fields of Envoy's own configuration
// (its bootstrap), which sits beside the rate limit configuration in many
// examples and is easy to leave in the directory --rls-config reads.
var envoyBootstrap = map[string]bool{
	"static_resources": true, "dynamic_resources": true, "admin": true, "node": true,
	"layered_runtime": true, "overload_manager": true, "cluster_manager": true,
}

// unknownKey is the error for k, a key no block knows, in the mapping
// what names.
func (p *parser) unknownKey(k *yaml.Node, what string) error {
	b, ok := blocks[what]
	if !ok {
		b.name = what
		for name := range validKeys {
			b.fields = append(b.fields, name)
		}
		slices.Sort(b.fields)
	}
	hint := "fields: " + strings.Join(b.fields, ", ")
	if s, ok := suggest.Closest(k.Value, b.fields); ok {
		hint = fmt.Sprintf("did you mean %q?", s)
	} else if what == "the file" && envoyBootstrap[k.Value] {
		hint = "this is Envoy's own configuration, not a rate limit configuration: keep it out of the rate limit configuration's directory"
	}
	return p.errorf(k, "unknown field %q in %s (%s)", k.Value, b.name, hint)
}

// Bounds on what one file may make Parse visit: aliases can make a small
// file expand without end, or into itself.
const (
	maxNodes = 1 << 20
	maxDepth = 64 // nested mappings and lists
)

// parser reads one file. It is used by one goroutine.
type parser struct {
	file     string
	warnings []string
	visited  int
	depth    int
}

// enter counts one more level of nesting at n; leave when done.
func (p *parser) enter(n *yaml.Node) error {
	if p.depth++; p.depth > maxDepth {
		return p.errorf(n, "nested more than %d levels deep", maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// pair is one entry of a mapping.
type pair struct{ k, v *yaml.Node }

func (p *parser) errorf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("rls: %s:%d: %s", p.file, n.Line, fmt.Sprintf(format, args...))
}

func (p *parser) warnf(n *yaml.Node, format string, args ...any) {
	p.warnings = append(p.warnings, fmt.Sprintf("%s:%d: %s", p.file, n.Line, fmt.Sprintf(format, args...)))
}

// resolve follows aliases and documents to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for {
		switch {
		case n.Kind == yaml.AliasNode && n.Alias != nil:
			n = n.Alias
		case n.Kind == yaml.DocumentNode && len(n.Content) == 1:
			n = n.Content[0]
		default:
			return n
		}
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// describe names a node's kind for an error.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
	}
	return "nothing"
}

// mapping checks that n is a mapping of known, unrepeated string keys and
// returns its entries in order.
func (p *parser) mapping(n *yaml.Node, what string) ([]pair, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, "%s must be a mapping, got %s", what, describe(n))
	}
	p.visited += len(n.Content)
	if p.visited > maxNodes {
		return nil, p.errorf(n, "more than %d YAML nodes (aliases expand too far)", maxNodes)
	}
	pairs := make([]pair, 0, len(n.Content)/2)
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		switch {
		case k.Kind == yaml.ScalarNode && k.Tag == "!!merge":
			return nil, p.errorf(k, "YAML merge keys (<<) are not supported")
		case k.Kind != yaml.ScalarNode || k.Tag != "!!str":
			return nil, p.errorf(k, "key is not a string: %s", describe(k))
		case !validKeys[k.Value]:
			return nil, p.unknownKey(k, what)
		}
		if line, dup := seen[k.Value]; dup {
			return nil, p.errorf(k, "key %q repeated (first at line %d)", k.Value, line)
		}
		seen[k.Value] = k.Line
		pairs = append(pairs, pair{k, v})
	}
	return pairs, nil
}

// misplaced accepts a known key where it means nothing, as
// envoyproxy/ratelimit does, after checking what it holds.
func (p *parser) misplaced(kv pair) error {
	p.warnf(kv.k, "key %q means nothing here; ignored", kv.k.Value)
	return p.anything(kv.v)
}

// anything checks a value with no meaning: lists hold mappings, mappings
// known keys, scalars are strings, whole numbers, booleans or null.
func (p *parser) anything(n *yaml.Node) error {
	n = resolve(n)
	if err := p.enter(n); err != nil {
		return err
	}
	defer p.leave()
	switch n.Kind {
	case yaml.MappingNode:
		pairs, err := p.mapping(n, "a value")
		for _, kv := range pairs {
			if err == nil {
				err = p.anything(kv.v)
			}
		}
		return err
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if e = resolve(e); e.Kind != yaml.MappingNode {
				return p.errorf(e, "a list may hold only mappings, got %s", describe(e))
			}
			if err := p.anything(e); err != nil {
				return err
			}
		}
		return nil
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str", "!!int", "!!bool", "!!null":
			return nil
		}
	}
	return p.errorf(n, "unexpected %s", describe(n))
}

// str reads a string field. Whole numbers and booleans are taken as
// written (value: 200 is "200"); null is "".
func (p *parser) str(kv pair) (string, error) {
	n := kv.v
	if n.Kind == yaml.ScalarNode {
		switch n.Tag {
		case "!!str", "!!int", "!!bool":
			return n.Value, nil
		case "!!null":
			return "", nil
		}
	}
	return "", p.errorf(n, "%s must be a string, got %s", kv.k.Value, describe(n))
}

// boolean reads a boolean field: true/false, YAML 1.1's yes/no/on/off, or
// null for false.
func (p *parser) boolean(kv pair) (bool, error) {
	n := kv.v
	if isNull(n) {
		return false, nil
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		return false, p.errorf(n, "%s must be true or false, got %s", kv.k.Value, describe(n))
	}
	return b, nil
}

// uint32Field reads a whole number between 0 and 2^32-1; null is 0.
func (p *parser) uint32Field(kv pair) (uint32, error) {
	n := kv.v
	if isNull(n) {
		return 0, nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, p.errorf(n, "%s must be a whole number, got %s", kv.k.Value, describe(n))
	}
	var v int64
	if n.Decode(&v) != nil || v < 0 || v > math.MaxUint32 {
		return 0, p.errorf(n, "%s must be between 0 and %d, got %s", kv.k.Value, uint32(math.MaxUint32), n.Value)
	}
	return uint32(v), nil
}

// sequence returns a list's items; null is an empty list.
func (p *parser) sequence(kv pair) ([]*yaml.Node, error) {
	n := kv.v
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, "%s must be a list, got %s", kv.k.Value, describe(n))
	}
	p.visited += len(n.Content)
	return n.Content, nil
}
