package peer

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
	"github.com/ringlimit/ringlimit/status"
)

// A known status.Stats goes on the wire as the peer protocol's
// StatsResponse, field by field (proto/peer/v1/peer.proto), and comes back
// the same; durations travel in whole microseconds (lag) and milliseconds
// (uptime).
func TestStatsWire(t *testing.T) {
	st := Stats{Name: "node-2", Keys: 2, RingVersion: 7, Checks: 100, Refused: 7, Forwarded: 40, Degraded: 2, PeerChecks: 3,
		ReplicationLag: 1500 * time.Microsecond, ReplicationPending: 3, PolicyVersion: "sha256:0123", RLSVersion: "rls:4567",
		Uptime: 90 * time.Second, Version: "v1.2.3", Peeks: 11, Reservations: 12, Settles: 13, Resets: 14,
		Adaptive: []status.AdaptiveScope{{Scope: "tier:free", Limit: 7}}}
	got, err := proto.MarshalOptions{Deterministic: true}.Marshal(statsToProto(&st))
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	str := func(n protowire.Number, s string) {
		want = protowire.AppendTag(want, n, protowire.BytesType)
		want = protowire.AppendString(want, s)
	}
	num := func(n protowire.Number, v uint64) {
		want = protowire.AppendTag(want, n, protowire.VarintType)
		want = protowire.AppendVarint(want, v)
	}
	str(1, "node-2")
	num(2, 2)
	num(3, 7)
	num(4, 100)
	num(5, 7)
	num(6, 40)
	num(7, 2)
	num(8, 3)
	num(9, 1500)
	num(10, 3)
	str(11, "sha256:0123")
	str(12, "rls:4567")
	num(13, 90000)
	str(14, "v1.2.3")
	num(15, 11)
	num(16, 12)
	num(17, 13)
	num(18, 14)
	scope := protowire.AppendVarint(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "tier:free"), 2, protowire.VarintType), 7)
	want = protowire.AppendBytes(protowire.AppendTag(want, 20, protowire.BytesType), scope)
	if !bytes.Equal(got, want) {
		t.Fatalf("StatsResponse bytes\n%x\nwant\n%x", got, want)
	}
	var resp peerv1.StatsResponse
	if err := proto.Unmarshal(got, &resp); err != nil {
		t.Fatal(err)
	}
	if back := statsFromProto(&resp); !reflect.DeepEqual(back, st) {
		t.Fatalf("round trip = %+v\nwant %+v", back, st)
	}
}
