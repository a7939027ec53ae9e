package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/rls"
)

// Validation is what `ringlimit policy validate --json` and `ringlimit rls
// validate --json` print.
type Validation struct {
	// File is the file at fault when invalid (for rls, the one in the
	// directory), else the path given.
	File string `json:"file"`
	OK   bool   `json:"ok"`
	// Line is the line of the first error, 0 when no line applies (an
	// unreadable or empty file).
	Line int `json:"line,omitempty"`
	// Error is the first error, without the file and line.
	Error string `json:"error,omitempty"`
	// Version is the version nodes report once they load it.
	Version string `json:"version,omitempty"`
	// Policies and Default: a valid policy file's policies, sorted, and
	// the one a request naming none uses.
	Policies []string `json:"policies,omitempty"`
	Default  string   `json:"default,omitempty"`
	// Domains and Warnings: a valid RLS configuration's domains, sorted,
	// and what it sets that ringlimit accepts and ignores ("file:line: ...").
	Domains  []string `json:"domains,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// yamlLine finds the line a yaml.v3 error names: "yaml: line 5: ..." or
// "line 7: field x not found in type ..." (the first of an unmarshal error's
// list).
var yamlLine = regexp.MustCompile(`(?:^|yaml: |\n\s*)line (\d+): (.*)`)

// policyValidate parses FILE with policy.Parse, as a node loads it.
func (e *env) policyValidate(args []string) error {
	pos, err := e.parse(newFlagSet("policy validate", e.stderr), args, 1, 1, "policy validate FILE")
	if err != nil {
		return err
	}
	file := pos[0]
	v := Validation{File: file}
	data, err := readBounded(file, policy.MaxFileBytes)
	if err == nil {
		var set *policy.Set
		if set, err = policy.Parse(data, file); err == nil {
			v.OK, v.Version, v.Default = true, set.Version, set.Default
			for name := range set.Policies {
				v.Policies = append(v.Policies, name)
			}
			slices.Sort(v.Policies)
		} else {
			v.Line, v.Error = policyErrorLine(data, file, err)
		}
	} else {
		v.Error = err.Error()
	}
	return e.printValidation(&v, func() string {
		return fmt.Sprintf("%s: ok: version %s, policies %s (default %s)", file, v.Version, strings.Join(v.Policies, ", "), orNone(v.Default))
	})
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// policyErrorLine returns the line of the file that err, policy.Parse's
// error for data, is about, and the error without its "policy: FILE: "
// prefix. A YAML error names its line; a validation error names a path
// (policies.api.tiers.free.per, policies.api.routes[1].limit), looked up
// in the file: the line of the deepest key of the path found there.
func policyErrorLine(data []byte, file string, err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "policy: "+file+": ")
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, strings.TrimSpace(m[2])
	}
	path, _, ok := strings.Cut(msg, ": ")
	if !ok || strings.ContainsAny(path, " \t") && !strings.HasPrefix(path, "policies.") {
		return 0, msg
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0, msg
	}
	return pathLine(doc.Content[0], path), msg
}

// pathLine walks path (keys joined by '.', sequence items as [index] or
// [match] for a route) down from n and returns the line of the last step
// found.
func pathLine(n *yaml.Node, path string) int {
	line := n.Line
	rest := path
	for rest != "" {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		switch n.Kind {
		case yaml.MappingNode:
			// The longest key the path continues with: names may hold '.'.
			best := -1
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if strings.HasPrefix(rest, k) && (len(rest) == len(k) || rest[len(k)] == '.' || rest[len(k)] == '[') &&
					(best < 0 || len(k) > len(n.Content[best].Value)) {
					best = i
				}
			}
			if best < 0 {
				return line
			}
			line = n.Content[best].Line
			rest = strings.TrimPrefix(rest[len(n.Content[best].Value):], ".")
			n = n.Content[best+1]
		case yaml.SequenceNode:
			if !strings.HasPrefix(rest, "[") {
				return line
			}
			end := strings.Index(rest, "]")
			if end < 0 {
				return line
			}
			sel := rest[1:end]
			var item *yaml.Node
			if i, err := strconv.Atoi(sel); err == nil && i >= 0 && i < len(n.Content) {
				item = n.Content[i]
			} else {
				for _, it := range n.Content {
					for j := 0; j+1 < len(it.Content); j += 2 {
						if it.Kind == yaml.MappingNode && it.Content[j].Value == "match" && it.Content[j+1].Value == sel {
							item = it
						}
					}
				}
			}
			if item == nil {
				return line
			}
			line, n = item.Line, item
			rest = strings.TrimPrefix(rest[end+1:], ".")
		default:
			return line
		}
	}
	return line
}

// rlsLine splits an rls error, "rls: FILE:LINE: msg" or "rls: FILE: yaml:
// line N: msg", into its file, line and message.
var rlsLine = regexp.MustCompile(`^rls: (.+?):(\d+): (?s:(.*))$`)
var rlsYAML = regexp.MustCompile(`^rls: (.+?): yaml: line (\d+): (?s:(.*))$`)

// rlsValidate loads PATH with rls.Load, as a node loads --rls-config.
func (e *env) rlsValidate(args []string) error {
	pos, err := e.parse(newFlagSet("rls validate", e.stderr), args, 1, 1, "rls validate PATH")
	if err != nil {
		return err
	}
	path := pos[0]
	v := Validation{File: path}
	cfg, err := rls.Load(path)
	if err == nil {
		v.OK, v.Version, v.Domains, v.Warnings = true, cfg.Version(), cfg.Domains(), cfg.Warnings()
	} else {
		msg := err.Error()
		v.Error = strings.TrimPrefix(msg, "rls: ")
		for _, re := range []*regexp.Regexp{rlsYAML, rlsLine} {
			if m := re.FindStringSubmatch(msg); m != nil {
				v.File, v.Error = m[1], m[3]
				v.Line, _ = strconv.Atoi(m[2])
				break
			}
		}
	}
	if v.OK && !e.g.json {
		for _, w := range v.Warnings {
			fmt.Fprintf(e.stderr, "warning: %s\n", w)
		}
	}
	return e.printValidation(&v, func() string {
		s := fmt.Sprintf("%s: ok: %d domains (%s), version %s", path, len(v.Domains), strings.Join(v.Domains, ", "), v.Version)
		if len(v.Warnings) > 0 {
			s += fmt.Sprintf(", %d warnings", len(v.Warnings))
		}
		return s
	})
}

// printValidation prints v: with --json on stdout; else summary() on
// stdout when valid, FILE:LINE: error on stderr when not (exit 1).
func (e *env) printValidation(v *Validation, summary func() string) error {
	if e.g.json {
		if err := json.NewEncoder(e.stdout).Encode(v); err != nil {
			return err
		}
	} else if v.OK {
		fmt.Fprintln(e.stdout, summary())
	} else if v.Line > 0 {
		fmt.Fprintf(e.stderr, "%s:%d: %s\n", v.File, v.Line, v.Error)
	} else {
		fmt.Fprintf(e.stderr, "%s: %s\n", v.File, v.Error)
	}
	if !v.OK {
		return &exitError{code: exitRefused}
	}
	return nil
}

// readBounded reads at most limit bytes of file, and fails beyond.
func readBounded(file string, limit int) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}
