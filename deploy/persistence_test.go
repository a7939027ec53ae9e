package deploy

import "testing"

// The state file's volume: with the default values a 1Gi claim per pod
// (volumeClaimTemplates "data", ReadWriteOnce) in the default storage
// class, or the class named; with persistence off, an emptyDir "data" and
// no claim. Either way the node writes its state file there.
func TestChartPersistence(t *testing.T) {
	sts := render(t, "", monitoringCaps()).statefulSet(t)
	if n := len(sts.Spec.VolumeClaimTemplates); n != 1 {
		t.Fatalf("%d volumeClaimTemplates, want 1", n)
	}
	pvc := sts.Spec.VolumeClaimTemplates[0]
	check(t, "claim name", pvc.Name, "data")
	check(t, "claim size", pvc.Spec.Resources.Requests.Storage().String(), "1Gi")
	check(t, "claim access modes", len(pvc.Spec.AccessModes), 1)
	if pvc.Spec.StorageClassName != nil {
		t.Errorf("storage class %q, want the default (none named)", *pvc.Spec.StorageClassName)
	}
	sts = render(t, "persistence: {enabled: true, size: 5Gi, storageClass: fast}", monitoringCaps()).statefulSet(t)
	if c := sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName; c == nil || *c != "fast" {
		t.Errorf("storage class %v, want fast", c)
	}
	check(t, "claim size", sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String(), "5Gi")
	sts = render(t, "persistence: {enabled: false, size: 1Gi}", monitoringCaps()).statefulSet(t)
	if n := len(sts.Spec.VolumeClaimTemplates); n != 0 {
		t.Fatalf("persistence off: %d volumeClaimTemplates, want none", n)
	}
	found := false
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			found = v.EmptyDir != nil
		}
	}
	if !found {
		t.Errorf("persistence off: no emptyDir volume named data")
	}
}
