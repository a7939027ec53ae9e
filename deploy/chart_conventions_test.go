package deploy

import (
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// TestChartKubeVersion: the chart asks for Kubernetes 1.30 or later (the
// preStop sleep action), pre-release and vendor builds of it included, as
// helm install checks against the cluster's version.
func TestChartKubeVersion(t *testing.T) {
	ch := loadChart(t)
	check(t, "kubeVersion", ch.Metadata.KubeVersion, ">=1.30.0-0")
	for version, ok := range map[string]bool{
		"v1.30.0": true, "v1.33.4-eks-0123abc": true, "v1.30.0-rc.1": true, "v2.0.0": true,
		"v1.29.9": false, "v1.20.0": false,
	} {
		if got := chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, version); got != ok {
			t.Errorf("Kubernetes %s compatible: %v, want %v", version, got, ok)
		}
	}
}
