package api

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"pgregory.net/rapid"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// TestSameLimitEveryField: two limits that differ in any one field of the
// message are not the same limit, so that a field added to Limit and not
// to sameLimit fails here instead of reusing another limit's parse.
func TestSameLimitEveryField(t *testing.T) {
	fields := (&pb.Limit{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		var v protoreflect.Value
		switch fd.Kind() {
		case protoreflect.Int64Kind:
			v = protoreflect.ValueOfInt64(7)
		case protoreflect.BoolKind:
			v = protoreflect.ValueOfBool(true)
		case protoreflect.StringKind:
			v = protoreflect.ValueOfString("x")
		case protoreflect.EnumKind:
			v = protoreflect.ValueOfEnum(1)
		default:
			t.Fatalf("limit field %s is a %v: teach this test and sameLimit about it", fd.Name(), fd.Kind())
		}
		a, b := &pb.Limit{}, &pb.Limit{}
		b.ProtoReflect().Set(fd, v)
		if sameLimit(a, b) || sameLimit(b, a) {
			t.Errorf("limits differing in %s are the same to sameLimit", fd.Name())
		}
		a.ProtoReflect().Set(fd, v)
		if !sameLimit(a, b) {
			t.Errorf("limits both with %s = %v differ to sameLimit", fd.Name(), v)
		}
	}
}

// TestInlineMemoProperty: over any sequence of inline checks (keys, limits,
// costs and reservations repeated or not, invalid ones among them), the
// memo builds each check exactly as checkFromProto does, error included.
func TestInlineMemoProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var m inlineMemo
		// Two limits, each valid or not, that the checks draw from, as a
		// copy or the same message: consecutive checks often repeat one.
		var limits [2]*pb.Limit
		for j := range limits {
			name := func(s string) string { return fmt.Sprint(s, j) }
			limits[j] = &pb.Limit{
				Algorithm:   pb.Algorithm(rapid.IntRange(0, 6).Draw(rt, name("alg"))),
				Limit:       rapid.SampledFrom([]int64{0, 1, 10}).Draw(rt, name("limit")),
				PerMs:       rapid.SampledFrom([]int64{0, 1000, 60_000}).Draw(rt, name("per")),
				Burst:       rapid.SampledFrom([]int64{0, 5, -1}).Draw(rt, name("burst")),
				FailureMode: pb.FailureMode(rapid.IntRange(0, 3).Draw(rt, name("mode"))),
				Lease:       rapid.Bool().Draw(rt, name("lease")),
				Calendar:    rapid.SampledFrom([]string{"", "day", "month"}).Draw(rt, name("calendar")),
				Timezone:    rapid.SampledFrom([]string{"", "Europe/Paris"}).Draw(rt, name("zone")),
			}
		}
		for i := range rapid.IntRange(1, 30).Draw(rt, "n") {
			name := func(s string) string { return fmt.Sprint(s, i) }
			c := &pb.Check{Key: rapid.SampledFrom([]string{"a", "b", "", strings.Repeat("k", 300), "c\xff"}).Draw(rt, name("key"))}
			switch pick := rapid.IntRange(0, 4).Draw(rt, name("limit")); {
			case pick < 2:
				c.Limit = limits[pick]
			case pick < 4:
				c.Limit = proto.Clone(limits[pick-2]).(*pb.Limit)
			}
			if rapid.Bool().Draw(rt, name("hasCost")) {
				cost := rapid.SampledFrom([]int64{-1, 0, 1, 10, 11}).Draw(rt, name("cost"))
				c.Cost = &cost
			}
			c.Reserve = rapid.Bool().Draw(rt, name("reserve"))
			c.ReserveTtlMs = rapid.SampledFrom([]int64{0, 1, 60_000, -5}).Draw(rt, name("ttl"))
			want, werr := checkFromProto(c)
			got, gerr := m.check(c)
			if fmt.Sprint(gerr) != fmt.Sprint(werr) || (werr == nil && !reflect.DeepEqual(got, want)) {
				rt.Fatalf("check %d %v: memo %+v, %v; checkFromProto %+v, %v", i, c, got, gerr, want, werr)
			}
		}
	})
}
