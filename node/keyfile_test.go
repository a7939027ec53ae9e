package node

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
)

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

func TestParseKeys(t *testing.T) {
	k16, k32 := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 32)
	for i, tt := range []struct {
		file    string
		want    [][]byte
		wantErr string
	}{
		{b64(k32) + "\n", [][]byte{k32}, ""},
		{"# primary first\n\n  " + b64(k16) + "  \r\n" + b64(k32), [][]byte{k16, k32}, ""},
		{"", nil, "no key"},
		{"# only a comment\n", nil, "no key"},
		{"not base64!\n", nil, "line 1: not base64"},
		{b64(k32) + "\n" + b64(make([]byte, 20)), nil, "line 2: key of 20 bytes"},
		{b64(k16) + "\n" + b64(k16), nil, "line 2: key listed twice"},
	} {
		got, err := parseKeys([]byte(tt.file))
		switch {
		case tt.wantErr == "" && (err != nil || !slices.EqualFunc(got, tt.want, bytes.Equal)):
			t.Errorf("step %d: parseKeys(%q) = %x, %v want %x", i, tt.file, got, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("step %d: parseKeys(%q) = %v, want an error containing %q", i, tt.file, err, tt.wantErr)
		}
	}
}

func TestPrintNewKey(t *testing.T) {
	var a, b bytes.Buffer
	if err := printNewKey(&a); err != nil {
		t.Fatal(err)
	}
	if err := printNewKey(&b); err != nil {
		t.Fatal(err)
	}
	keys, err := parseKeys(append(a.Bytes(), b.Bytes()...))
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 {
		t.Errorf("two printed keys parse as %x, %v; want two different 32-byte keys", keys, err)
	}
}
