// Package textwrap fills words into lines of a given width, for the help
// texts of the binaries.
package textwrap

import (
	"fmt"
	"io"
	"strings"
)

// Write writes text's words to w in lines of at most width bytes: the first
// line starts with first (indent when first is empty), the others with
// indent. A word longer than a line gets a line of its own. Nothing is
// written for a text without words when first is empty; no line ends in a
// space.
func Write(w io.Writer, first, text, indent string, width int) {
	line := first
	if first == "" {
		line = indent
	}
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			fmt.Fprintln(w, line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}
