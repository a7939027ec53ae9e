package status_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/status"
)

// roundTrip marshals v, compares the bytes with want, and decodes them
// back into a new value of v's type that must equal v.
func roundTrip[T any](t *testing.T, v T, want string) {
	t.Helper()
	got, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("json.Marshal(%T) =\n%s\nwant\n%s", v, got, want)
	}
	var back T
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Fatalf("round trip of %T = %+v, want %+v", v, back, v)
	}
}

// The bodies of GET /v1/cluster and GET /v1/ring, as docs/openapi.yaml
// names their fields.
func TestClusterJSON(t *testing.T) {
	r := status.Router{ReplicationFactor: 2, ReplicationLag: 1500 * time.Microsecond, ReplicationPending: 3, Replicas: 40,
		StandingIn: 12, Successor: []status.StandIn{{Key: "k-1", Owner: "node-3"}}, Minority: true, ClusterSize: 3, Down: []string{"node-3"}}
	c := status.Cluster{Self: "node-1", RingVersion: 7, Replication: r.Replication(), Quorum: r.Quorum(), Members: []status.Member{
		{Name: "node-1", HTTP: "10.0.0.1:8080", GRPC: "10.0.0.1:8081", Peer: "10.0.0.1:7947", Gossip: "10.0.0.1:7946", State: "alive", OnRing: true, Keys: 5},
		{Name: "node-3", GRPC: "g3", Peer: "p3", Gossip: "q3", State: "dead", Keys: -1},
	}}
	roundTrip(t, c, `{"self":"node-1","ring_version":7,"members":[`+
		`{"name":"node-1","http":"10.0.0.1:8080","grpc":"10.0.0.1:8081","peer":"10.0.0.1:7947","gossip":"10.0.0.1:7946","state":"alive","on_ring":true,"keys":5},`+
		`{"name":"node-3","grpc":"g3","peer":"p3","gossip":"q3","state":"dead","on_ring":false,"keys":-1}],`+
		`"replication":{"factor":2,"lag_ms":1.5,"pending":3,"replicas":40,"successor_keys":12,"successor_for":[{"key":"k-1","owner":"node-3"}]},`+
		`"quorum":{"cluster_size":3,"minority":true,"down":["node-3"]}}`)
	// Without replication, stand-ins or dead members, the lists are left out.
	var idle status.Router
	roundTrip(t, status.Cluster{Self: "a", Replication: idle.Replication(), Quorum: idle.Quorum()},
		`{"self":"a","ring_version":0,"members":null,"replication":{"factor":0,"lag_ms":0,"pending":0,"replicas":0,"successor_keys":0},`+
			`"quorum":{"cluster_size":0,"minority":false}}`)
}

func TestRingJSON(t *testing.T) {
	rg := status.NewRing([]string{"b", "a", "b", "b"}, 9)
	want := status.Ring{Version: 9, Members: []status.RingMember{{Name: "a", Partitions: 1, Share: 0.25}, {Name: "b", Partitions: 3, Share: 0.75}},
		Owners: []int{1, 0, 1, 1}}
	if !reflect.DeepEqual(rg, want) {
		t.Fatalf("NewRing = %+v, want %+v", rg, want)
	}
	roundTrip(t, rg, `{"ring_version":9,"members":[{"name":"a","partitions":1,"share":0.25},{"name":"b","partitions":3,"share":0.75}],"owners":[1,0,1,1]}`)
	// No ring yet: empty lists, not null.
	roundTrip(t, status.NewRing(nil, 0), `{"ring_version":0,"members":[],"owners":[]}`)
}

// A node's Stats as the status page shows them: seconds and milliseconds
// from the whole milliseconds and microseconds the peer protocol carries.
func TestNodeStatsJSON(t *testing.T) {
	st := status.Stats{Name: "node-2", Keys: 2, RingVersion: 7, Checks: 100, Refused: 7, Forwarded: 40, Degraded: 2, PeerChecks: 3,
		ReplicationLag: 1500*time.Microsecond + 999*time.Nanosecond, ReplicationPending: 3, PolicyVersion: "sha256:0123", RLSVersion: "rls:4567",
		Uptime: 90*time.Second + 1500*time.Microsecond, Version: "v1.2.3"}
	ns := st.NodeStats()
	roundTrip(t, ns, `{"name":"node-2","version":"v1.2.3","uptime_s":90.001,"keys":2,"ring_version":7,"checks":100,"refused":7,`+
		`"forwarded":40,"degraded":2,"peer_checks":3,"replication_lag_ms":1.5,"replication_pending":3,`+
		`"policy_version":"sha256:0123","rls_version":"rls:4567"}`)
	// Without a policy or RLS the versions are left out.
	bare := status.Stats{Name: "n"}
	roundTrip(t, bare.NodeStats(), `{"name":"n","version":"","uptime_s":0,"keys":0,"ring_version":0,"checks":0,"refused":0,`+
		`"forwarded":0,"degraded":0,"peer_checks":0,"replication_lag_ms":0,"replication_pending":0}`)
}

// A node that owns adaptive keys shows their scopes and current limits;
// one that owns none leaves the field out.
func TestNodeStatsAdaptiveJSON(t *testing.T) {
	st := status.Stats{Name: "n", Adaptive: []status.AdaptiveScope{{Scope: "route:/slow", Limit: 12}, {Scope: "tier:free", Limit: 7}}}
	roundTrip(t, st.NodeStats(), `{"name":"n","version":"","uptime_s":0,"keys":0,"ring_version":0,"checks":0,"refused":0,`+
		`"forwarded":0,"degraded":0,"peer_checks":0,"replication_lag_ms":0,"replication_pending":0,`+
		`"adaptive":[{"scope":"route:/slow","limit":12},{"scope":"tier:free","limit":7}]}`)
}
