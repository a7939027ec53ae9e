package node

import "testing"

func TestCapsFor(t *testing.T) {
	for _, tt := range []struct {
		nofile   uint64
		maxConns int
		want     connCaps
	}{
		{1024, 0, connCaps{nofile: 1024, reserve: 256, public: 384, peer: 64}},
		{1 << 20, 0, connCaps{nofile: 1 << 20, reserve: 1 << 17, public: (1<<20 - 1<<17) / 2, peer: 1 << 15}},
		{300, 0, connCaps{nofile: 300, reserve: 256, public: 22, peer: 64}},
		{100, 0, connCaps{nofile: 100, reserve: 256, public: minConns, peer: 64}},
		{1024, 50, connCaps{nofile: 1024, reserve: 256, public: 50, peer: 64}},
		{^uint64(0), 0, connCaps{nofile: 1 << 24, reserve: 1 << 21, public: (1<<24 - 1<<21) / 2, peer: 1 << 19}},
	} {
		if got := capsFor(tt.nofile, tt.maxConns); got != tt.want {
			t.Errorf("capsFor(%d, %d) = %+v, want %+v", tt.nofile, tt.maxConns, got, tt.want)
		}
	}
}
