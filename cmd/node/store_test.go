package main

import "testing"

func TestByteSizeFlag(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"16MiB", 16 << 20, true},
		{"4KiB", 4096, true},
		{"2GiB", 2 << 30, true},
		{"1048576", 1 << 20, true},
		{"4095", 0, false},
		{"1KiB", 0, false},
		{"-1MiB", 0, false},
		{"16MB", 0, false},
		{"", 0, false},
		{"9999999GiB", 0, false},
	} {
		var b byteSize
		err := b.Set(c.in)
		if (err == nil) != c.ok || (c.ok && int64(b) != c.want) {
			t.Errorf("Set(%q) = %d, %v; want %d, ok %v", c.in, int64(b), err, c.want, c.ok)
		}
		if c.ok {
			var back byteSize
			if err := back.Set(b.String()); err != nil || back != b {
				t.Errorf("Set(String() %q) = %d, %v; want %d", b.String(), int64(back), err, int64(b))
			}
		}
	}
}
