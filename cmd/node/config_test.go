package main

import (
	"io"
	"reflect"
	"testing"

	"github.com/ringlimit/ringlimit/node"
)

// TestFlagDefaultsAreDefaultConfig: with no flag and no variable, the node
// is configured exactly as node.DefaultConfig.
func TestFlagDefaultsAreDefaultConfig(t *testing.T) {
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := node.DefaultConfig(); !reflect.DeepEqual(c.Config, want) {
		t.Errorf("flag defaults:\n%+v\nwant node.DefaultConfig():\n%+v", c.Config, want)
	}
}
