package node

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestInsecureMetric: ringlimit_insecure is 1 exactly when Insecure lets
// an exposed address run in clear.
func TestInsecureMetric(t *testing.T) {
	for _, tc := range []struct {
		peer     string
		insecure bool
		want     float64
	}{
		{"10.0.0.1:9190", true, 1},
		{"127.0.0.1:9190", true, 0},
		{"127.0.0.1:9190", false, 0},
	} {
		cfg := DefaultConfig()
		cfg.PeerAddr, cfg.Insecure = tc.peer, tc.insecure
		reg := prometheus.NewRegistry()
		if err := (certs{}).registerSecurity(reg, cfg); err != nil {
			t.Fatal(err)
		}
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 || mfs[0].GetName() != "ringlimit_insecure" {
			t.Fatalf("gathered %v, %v", mfs, err)
		}
		if got := mfs[0].GetMetric()[0].GetGauge().GetValue(); got != tc.want {
			t.Errorf("PeerAddr %s, Insecure %v: ringlimit_insecure = %v, want %v", tc.peer, tc.insecure, got, tc.want)
		}
	}
}
