package textwrap

import (
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name, first, text, indent string
		width                     int
		want                      string
	}{
		{"fits", "", "a b c", "  ", 20, "  a b c\n"},
		{"breaks at the width", "", "aaa bbb ccc", "  ", 9, "  aaa bbb\n  ccc\n"},
		{"first line's own start", "  name   ", "one two three", "         ", 18, "  name   one two\n         three\n"},
		{"a word longer than a line", "", "x averyveryverylongword y", " ", 8, " x\n averyveryverylongword\n y\n"},
		{"spaces collapse", "", "  a \n\t b  ", "", 10, "a b\n"},
		{"no words", "", "   ", "  ", 10, ""},
		{"no words after first", "name ", "", "", 10, "name\n"},
	} {
		var b strings.Builder
		Write(&b, tc.first, tc.text, tc.indent, tc.width)
		if b.String() != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, b.String(), tc.want)
		}
	}
}
