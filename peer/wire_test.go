package peer

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

func genWireCheck(t *rapid.T, label string) wireCheck {
	return wireCheck{
		key: rapid.StringN(0, 40, -1).Draw(t, label+".key"),
		limit: wireLimit{
			alg:   rapid.Uint32Range(0, 300).Draw(t, label+".alg"),
			limit: rapid.Int64().Draw(t, label+".limit"),
			perNs: rapid.Int64().Draw(t, label+".per"),
			burst: rapid.Int64().Draw(t, label+".burst"),
			cal:   rapid.OneOf(rapid.Just(uint32(0)), rapid.Uint32()).Draw(t, label+".calendar"),
			week:  rapid.OneOf(rapid.Just(uint32(0)), rapid.Uint32()).Draw(t, label+".week_start"),
			zone:  rapid.OneOf(rapid.Just(""), rapid.StringN(1, 40, -1)).Draw(t, label+".timezone"),
		},
		cost:          rapid.Int64().Draw(t, label+".cost"),
		refund:        rapid.Bool().Draw(t, label+".refund"),
		lease:         rapid.Int64().Draw(t, label+".lease"),
		final:         rapid.Bool().Draw(t, label+".final"),
		sync:          rapid.Bool().Draw(t, label+".sync"),
		peek:          rapid.Bool().Draw(t, label+".peek"),
		traced:        rapid.Bool().Draw(t, label+".traced"),
		trace:         traceContext(rapid.SliceOfN(rapid.Byte(), traceContextLen, traceContextLen).Draw(t, label+".trace")),
		reserveTTLNs:  rapid.OneOf(rapid.Just(int64(0)), rapid.Int64()).Draw(t, label+".reserve_ttl"),
		hasAdaptive:   rapid.Bool().Draw(t, label+".has_adaptive"),
		adaptive:      genSpec(t, label+".adaptive"),
		adaptiveScope: rapid.OneOf(rapid.Just(""), rapid.StringN(1, 20, -1)).Draw(t, label+".scope"),
	}
}

// maybeZero draws 0 half the time, so that a field is left out as often
// as it is written.
func maybeZero(t *rapid.T, label string) uint64 {
	return rapid.OneOf(rapid.Just(uint64(0)), rapid.Uint64()).Draw(t, label)
}

func batchToProto(m *checkBatch) *peerv1.CheckRequest {
	req := &peerv1.CheckRequest{From: m.from, Id: m.id, RingVersion: m.ringVersion}
	for _, c := range m.checks {
		pc := &peerv1.Check{
			Key:           c.key,
			Limit:         c.limit.toProto(),
			Cost:          c.cost,
			Refund:        c.refund,
			Lease:         c.lease,
			Final:         c.final,
			Sync:          c.sync,
			Peek:          c.peek,
			ReserveTtlNs:  c.reserveTTLNs,
			AdaptiveScope: c.adaptiveScope,
		}
		if c.hasAdaptive {
			pc.Adaptive = specToProto(&c.adaptive)
		}
		if c.traced {
			pc.Trace = bytes.Clone(c.trace[:])
		}
		req.Checks = append(req.Checks, pc)
	}
	if m.reverse != nil {
		req.ReverseAnswer = answerToProto(m.reverse)
	} else if m.reverseRaw != nil {
		var a checkAnswer
		if err := a.parse(m.reverseRaw); err != nil {
			panic(err)
		}
		req.ReverseAnswer = answerToProto(&a)
	}
	return req
}

func answerToProto(m *checkAnswer) *peerv1.CheckResponse {
	resp := &peerv1.CheckResponse{Owner: m.owner, Id: m.id, Error: m.err, Drain: m.drain}
	for _, d := range m.decisions {
		resp.Decisions = append(resp.Decisions, &peerv1.Decision{
			Allowed: d.allowed, Remaining: d.remaining, RetryAfterMs: d.retryAfterMs, ResetAfterMs: d.resetAfterMs,
			DelayMs: d.delayMs, LeaseGranted: d.leaseGranted, LeaseTtlMs: d.leaseTTLMs, Redirect: d.redirect,
			Full: d.full, Reservation: d.reservation, Limit: d.limit,
		})
	}
	if m.reverse != nil {
		resp.ReverseBatch = batchToProto(m.reverse)
	} else if m.reverseRaw != nil {
		var b checkBatch
		if err := b.parse(m.reverseRaw); err != nil {
			panic(err)
		}
		resp.ReverseBatch = batchToProto(&b)
	}
	return resp
}

// A batch carrying the answer to a reverse batch, and an answer carrying a
// reverse batch, each with or without a batch or answer of its own, encode
// as proto.Marshal encodes them and read back the same.
func TestWireReverseMatchesProto(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		inner := checkBatch{from: rapid.StringN(1, 12, -1).Draw(t, "ifrom"), id: rapid.Uint64Range(1, 1<<40).Draw(t, "iid"),
			ringVersion: maybeZero(t, "iversion")}
		for i := range rapid.IntRange(1, 4).Draw(t, "ichecks") {
			inner.checks = append(inner.checks, genWireCheck(t, fmt.Sprint("ic", i)))
		}
		innerAns := checkAnswer{owner: rapid.StringN(1, 12, -1).Draw(t, "iowner"), id: inner.id}
		for i := range len(inner.checks) {
			innerAns.decisions = append(innerAns.decisions, wireDecision{allowed: rapid.Bool().Draw(t, fmt.Sprint("ia", i)),
				remaining: rapid.Int64().Draw(t, fmt.Sprint("ir", i))})
		}
		outer := checkBatch{from: rapid.StringN(1, 12, -1).Draw(t, "from"), reverse: &innerAns}
		if rapid.Bool().Draw(t, "with checks") {
			outer.id = rapid.Uint64Range(1, 1<<40).Draw(t, "id")
			outer.checks = append(outer.checks, genWireCheck(t, "c"))
		}
		outerAns := checkAnswer{owner: rapid.StringN(1, 12, -1).Draw(t, "owner"), reverse: &inner}
		if rapid.Bool().Draw(t, "with decisions") {
			outerAns.id = rapid.Uint64Range(1, 1<<40).Draw(t, "aid")
			outerAns.decisions = append(outerAns.decisions, wireDecision{allowed: true, remaining: 3})
		}
		for _, m := range []interface {
			appender
			parser
		}{&outer, &outerAns} {
			var gen proto.Message
			var back interface {
				appender
				parser
			}
			switch m := m.(type) {
			case *checkBatch:
				gen, back = batchToProto(m), new(checkBatch)
			case *checkAnswer:
				gen, back = answerToProto(m), new(checkAnswer)
			}
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(gen)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.appendTo(nil); !bytes.Equal(got, want) || m.size() != len(want) {
				t.Fatalf("%T encodes as %x (size %d), proto.Marshal as %x", m, got, m.size(), want)
			}
			if err := back.parse(bytes.Clone(want)); err != nil {
				t.Fatal(err)
			}
			var again proto.Message
			switch b := back.(type) {
			case *checkBatch:
				again = batchToProto(b)
			case *checkAnswer:
				again = answerToProto(b)
			}
			if !proto.Equal(again, gen) {
				t.Fatalf("%T read back as %v, want %v", m, again, gen)
			}
		}
	})
}

// The hand-written encoding writes exactly the bytes proto.Marshal writes
// for the same CheckRequest and CheckResponse, and reads them back, for
// any values (negative numbers, empty and non-ASCII keys, empty batches).
func TestWireMatchesProto(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := checkBatch{from: rapid.StringN(0, 12, -1).Draw(t, "from"), id: rapid.Uint64().Draw(t, "id"),
			ringVersion: maybeZero(t, "version")}
		for i := range rapid.IntRange(0, 6).Draw(t, "checks") {
			m.checks = append(m.checks, genWireCheck(t, fmt.Sprint("c", i)))
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(batchToProto(&m))
		if err != nil {
			t.Fatal(err)
		}
		got := m.appendTo(nil)
		if !bytes.Equal(got, want) || m.size() != len(want) {
			t.Fatalf("request encodes as %x (size %d), proto.Marshal as %x", got, m.size(), want)
		}
		var back checkBatch
		if err := back.parse(bytes.Clone(want)); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(batchToProto(&back), batchToProto(&m)) {
			t.Fatalf("request read back as %+v, want %+v", back, m)
		}

		a := checkAnswer{
			owner: rapid.StringN(0, 12, -1).Draw(t, "owner"),
			id:    rapid.Uint64().Draw(t, "aid"),
			err:   rapid.StringN(0, 20, -1).Draw(t, "err"),
			drain: rapid.Bool().Draw(t, "drain"),
		}
		for i := range rapid.IntRange(0, 6).Draw(t, "decisions") {
			l := fmt.Sprint("d", i)
			a.decisions = append(a.decisions, wireDecision{
				allowed: rapid.Bool().Draw(t, l+".allowed"), remaining: rapid.Int64().Draw(t, l+".remaining"),
				retryAfterMs: rapid.Int64().Draw(t, l+".retry"), resetAfterMs: rapid.Int64().Draw(t, l+".reset"),
				delayMs: rapid.Int64().Draw(t, l+".delay"), leaseGranted: rapid.Int64().Draw(t, l+".lease"),
				leaseTTLMs:  rapid.Int64().Draw(t, l+".ttl"),
				redirect:    rapid.OneOf(rapid.Just(""), rapid.StringN(1, 12, -1)).Draw(t, l+".redirect"),
				full:        rapid.Bool().Draw(t, l+".full"),
				reservation: rapid.OneOf(rapid.Just(""), rapid.StringN(1, 40, -1)).Draw(t, l+".reservation"),
				limit:       rapid.OneOf(rapid.Just(int64(0)), rapid.Int64()).Draw(t, l+".limit"),
			})
		}
		want, err = proto.MarshalOptions{Deterministic: true}.Marshal(answerToProto(&a))
		if err != nil {
			t.Fatal(err)
		}
		if got := a.appendTo(nil); !bytes.Equal(got, want) || a.size() != len(want) {
			t.Fatalf("answer encodes as %x (size %d), proto.Marshal as %x", got, a.size(), want)
		}
		var aback checkAnswer
		if err := aback.parse(bytes.Clone(want)); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(answerToProto(&aback), answerToProto(&a)) {
			t.Fatalf("answer read back as %+v, want %+v", aback, a)
		}
	})
}

// The fields added with ring versions, final checks, redirects and full
// stores, each written alone and left out when zero, against proto.Marshal.
func TestWireNewFields(t *testing.T) {
	lim := toWireLimit(new(hourly(10)))
	for _, m := range []checkBatch{
		{from: "A", id: 1, checks: []wireCheck{{key: "k", limit: lim, cost: 1}}},
		{from: "A", id: 1, ringVersion: 1<<64 - 1, checks: []wireCheck{{key: "k", limit: lim, cost: 1}}},
		{from: "A", id: 1, ringVersion: 42, checks: []wireCheck{{key: "k", limit: lim, cost: 1, final: true}, {key: "j", limit: lim, cost: 2}}},
		{ringVersion: 3},
	} {
		want, err := proto.Marshal(batchToProto(&m))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.appendTo(nil); !bytes.Equal(got, want) || m.size() != len(want) {
			t.Errorf("%+v encodes as %x (size %d), proto.Marshal as %x", m, got, m.size(), want)
		}
		var back checkBatch
		if err := back.parse(bytes.Clone(want)); err != nil || back.ringVersion != m.ringVersion || len(back.checks) != len(m.checks) {
			t.Fatalf("%x read back as %+v, %v", want, back, err)
		}
		for i := range m.checks {
			if back.checks[i].final != m.checks[i].final {
				t.Errorf("%x: check %d read back with final %v, want %v", want, i, back.checks[i].final, m.checks[i].final)
			}
		}
	}
	for _, a := range []checkAnswer{
		{owner: "B", id: 2, decisions: []wireDecision{{allowed: true, remaining: 3}}},
		{owner: "B", id: 2, decisions: []wireDecision{{redirect: "C"}, {allowed: true}, {redirect: "node-ü"}}},
		{owner: "B", id: 2, decisions: []wireDecision{{full: true}, {allowed: true}, {retryAfterMs: 1000, full: true}}},
	} {
		want, err := proto.Marshal(answerToProto(&a))
		if err != nil {
			t.Fatal(err)
		}
		if got := a.appendTo(nil); !bytes.Equal(got, want) || a.size() != len(want) {
			t.Errorf("%+v encodes as %x (size %d), proto.Marshal as %x", a, got, a.size(), want)
		}
		var back checkAnswer
		if err := back.parse(bytes.Clone(want)); err != nil || len(back.decisions) != len(a.decisions) {
			t.Fatalf("%x read back as %+v, %v", want, back, err)
		}
		for i := range a.decisions {
			if back.decisions[i] != a.decisions[i] {
				t.Errorf("%x: decision %d read back as %+v, want %+v", want, i, back.decisions[i], a.decisions[i])
			}
		}
	}
}

// Truncated or corrupt messages are refused with an error, never a panic,
// and the codec hands anything that is not a peer message to protobuf.
func TestWireRefusesMalformed(t *testing.T) {
	m := checkBatch{from: "node-1", id: 9, checks: []wireCheck{{key: "k", limit: toWireLimit(new(hourly(10))), cost: 1}}}
	full := m.appendTo(nil)
	for n := 1; n < len(full); n++ {
		var back checkBatch
		_ = back.parse(bytes.Clone(full[:n])) // a cut between fields is a shorter valid message
	}
	for _, bad := range [][]byte{
		{0x12, 0x05, 0x0a},       // checks: length 5, 1 byte present
		{0x18},                   // id: tag with no varint
		{0x0b},                   // wire type 3 (start group): refused
		{0x12, 0x02, 0x12, 0x7f}, // a check whose limit overruns it
	} {
		var back checkBatch
		if err := back.parse(bytes.Clone(bad)); err == nil {
			t.Errorf("%x parsed", bad)
		}
	}
	var codec peerCodec
	out, err := codec.Marshal(&peerv1.StatsRequest{})
	if err != nil || out.Len() != 0 {
		t.Fatalf("a protobuf message through the codec: %v, %d bytes", err, out.Len())
	}
	var resp peerv1.CheckResponse
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer((&checkAnswer{owner: "B", id: 3}).appendTo(nil))}, &resp); err != nil || resp.GetOwner() != "B" || resp.GetId() != 3 {
		t.Fatalf("protobuf read of a hand-written answer: %v, %v", err, &resp)
	}
}

func FuzzWireParse(f *testing.F) {
	f.Add((&checkBatch{from: "a", id: 1, checks: []wireCheck{{key: "k", cost: 1}}}).appendTo(nil))
	f.Add((&checkBatch{from: "a", id: 1, ringVersion: 9, checks: []wireCheck{{key: "k", cost: 1, final: true}}}).appendTo(nil))
	f.Add((&checkBatch{from: "a", id: 1, checks: []wireCheck{{key: "k", cost: 1, traced: true, trace: traceContext{0: 1, 16: 2, 24: 1}}}}).appendTo(nil))
	f.Add((&checkAnswer{owner: "b", id: 1, decisions: []wireDecision{{allowed: true, remaining: -1}}}).appendTo(nil))
	f.Add((&checkAnswer{owner: "b", id: 1, decisions: []wireDecision{{redirect: "c"}}}).appendTo(nil))
	f.Add((&checkAnswer{owner: "b", id: 1, decisions: []wireDecision{{retryAfterMs: 1000, full: true}}}).appendTo(nil))
	f.Add((&checkBatch{from: "a", id: 1, checks: []wireCheck{{key: "k", cost: 1, reserveTTLNs: int64(time.Minute)}}}).appendTo(nil))
	f.Add((&checkAnswer{owner: "b", id: 1, decisions: []wireDecision{{allowed: true, reservation: "r1.aw.AAAAAAAAAAAAAAAA"}}}).appendTo(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m checkBatch
		if m.parse(bytes.Clone(b)) == nil {
			var p peerv1.CheckRequest
			if err := proto.Unmarshal(b, &p); err == nil && !proto.Equal(batchToProto(&m), withTraces(withLimits(dropUnknown(&p)))) {
				t.Fatalf("hand-written read %+v, protobuf %v", m, &p)
			}
		}
		var a checkAnswer
		if a.parse(bytes.Clone(b)) == nil {
			var p peerv1.CheckResponse
			if err := proto.Unmarshal(b, &p); err == nil && !proto.Equal(answerToProto(&a), dropUnknown(&p)) {
				t.Fatalf("hand-written read %+v, protobuf %v", a, &p)
			}
		}
	})
}

// dropUnknown clears the unknown fields of m and of the messages in it,
// which the hand-written reader skips.
func dropUnknown(m proto.Message) proto.Message {
	var drop func(protoreflect.Message)
	drop = func(m protoreflect.Message) {
		m.SetUnknown(nil)
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.Message() == nil:
			case fd.IsList():
				for i := range v.List().Len() {
					drop(v.List().Get(i).Message())
				}
			default:
				drop(v.Message())
			}
			return true
		})
	}
	drop(m.ProtoReflect())
	return m
}

// withLimits gives every check of req without a limit an empty one, as the
// hand-written reader does (a missing limit reads as zeros, and is refused
// by validation, not by the reader).
func withLimits(m proto.Message) proto.Message {
	for _, c := range m.(*peerv1.CheckRequest).GetChecks() {
		if c.Limit == nil {
			c.Limit = &peerv1.Limit{}
		}
	}
	return m
}

// withTraces drops the trace contexts of req that are not 25 bytes long,
// which the hand-written reader ignores (a later format, or garbage: not a
// reason to refuse a batch).
func withTraces(m proto.Message) proto.Message {
	for _, c := range m.(*peerv1.CheckRequest).GetChecks() {
		if len(c.Trace) != traceContextLen {
			c.Trace = nil
		}
	}
	return m
}

// BenchmarkWireParse reads a batch of 64 checks, as an owner does for each
// batch it receives.
func BenchmarkWireParse(b *testing.B) {
	m := checkBatch{from: "node-2", id: 1}
	for i := range 64 {
		m.checks = append(m.checks, wireCheck{key: fmt.Sprint("bench:", i), limit: toWireLimit(new(hourly(1000))), cost: 1})
	}
	msg := m.appendTo(nil)
	var back checkBatch
	b.ReportAllocs()
	for b.Loop() {
		if err := back.parse(msg); err != nil || len(back.checks) != 64 {
			b.Fatal(err)
		}
	}
}

func hourly(n int64) bucket.Limit { return bucket.MustLimit(bucket.TokenBucket, n, time.Hour, 0) }
