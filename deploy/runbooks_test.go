package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// runbookBase is where every alert's runbook_url points, up to the anchor.
const runbookBase = "https://github.com/ringlimit/ringlimit/blob/main/docs/runbooks.md#"

// headingAnchor is the anchor GitHub gives a Markdown heading: lower case,
// spaces as hyphens, punctuation other than hyphens and underscores dropped.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// runbookSections are docs/runbooks.md's sections by their headings'
// anchors: each heading's text up to the next heading.
func runbookSections(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	heading := regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	locs := heading.FindAllSubmatchIndex(data, -1)
	for i, loc := range locs {
		end := len(data)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		sections[headingAnchor(string(data[loc[2]:loc[3]]))] = string(data[loc[1]:end])
	}
	return sections
}

// TestRunbooks: every alert of the rule file links its runbook, a section
// of docs/runbooks.md under the alert's name that says what the alert
// means, how to confirm it and what to do; every link inside the runbooks
// leads to a section that exists.
func TestRunbooks(t *testing.T) {
	sections := runbookSections(t)
	var alerts int
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			url := r.Annot["runbook_url"]
			anchor, ok := strings.CutPrefix(url, runbookBase)
			if !ok {
				t.Errorf("%s: runbook_url %q, want %s<anchor>", r.Alert, url, runbookBase)
				continue
			}
			check(t, r.Alert+" runbook anchor", anchor, headingAnchor(r.Alert))
			body, ok := sections[anchor]
			if !ok {
				t.Errorf("%s: runbook_url %s: docs/runbooks.md has no heading with the anchor %q", r.Alert, url, anchor)
				continue
			}
			for _, part := range []string{"**What it means.**", "**Confirm.**", "**What to do.**"} {
				if !strings.Contains(body, part) {
					t.Errorf("%s: its runbook lacks %s", r.Alert, part)
				}
			}
		}
	}
	if alerts < 10 {
		t.Errorf("%d alerts in the rule file, want at least 10", alerts)
	}
	data, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(data), -1) {
		if _, ok := sections[m[1]]; !ok {
			t.Errorf("docs/runbooks.md links to #%s, which no heading has", m[1])
		}
	}
}
