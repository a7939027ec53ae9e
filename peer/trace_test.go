package peer

import (
	"bytes"
	"context"
	"encoding/hex"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

var (
	testTraceID = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	testSpanID  = trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
)

func spanCtx(flags trace.TraceFlags) context.Context {
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: testTraceID, SpanID: testSpanID, TraceFlags: flags}))
}

// A check without a trace context encodes to the bytes it had before the
// field trace existed: nothing is added on the wire when tracing is off.
func TestWireUntracedCheckUnchanged(t *testing.T) {
	c := wireCheck{key: "user:42", limit: toWireLimit(new(hourly(10))), cost: 1}
	// Written by the codec before the field trace existed.
	const before = "0a07757365723a3432120b100a1880c0e285e368200a1801"
	if got := hex.EncodeToString(c.appendTo(nil)); got != before || c.size() != len(before)/2 {
		t.Fatalf("untraced check encodes as %s (size %d), want %s", got, c.size(), before)
	}
	tc, ok := traceOf(context.Background())
	if ok {
		t.Fatalf("a context without a span gives trace context %x", tc)
	}
	if _, ok := traceOf(spanCtx(0)); ok {
		t.Fatal("an unsampled span context is carried")
	}
}

// A traced check carries trace id, span id and flags as field 7 (25 bytes)
// after the fields it had, reads back the same, and proto reads it too.
func TestWireTraceRoundTrip(t *testing.T) {
	tc, ok := traceOf(spanCtx(trace.FlagsSampled))
	if !ok {
		t.Fatal("a sampled span context is not carried")
	}
	c := wireCheck{key: "user:42", limit: toWireLimit(new(hourly(10))), cost: 1, trace: tc, traced: true}
	untraced := c
	untraced.traced = false
	b := c.appendTo(nil)
	old := untraced.appendTo(nil)
	want := protowire.AppendBytes(protowire.AppendTag(bytes.Clone(old), fCheckTrace, protowire.BytesType), append(append(testTraceID[:], testSpanID[:]...), 1))
	if !bytes.Equal(b, want) || c.size() != len(b) || len(b)-len(old) != 27 {
		t.Fatalf("traced check encodes as %x (size %d), want %x", b, c.size(), want)
	}
	var back wireCheck
	if err := back.parse(b); err != nil || !back.traced || back.trace != tc {
		t.Fatalf("read back as %+v, %v", back, err)
	}
	sc := back.trace.spanContext()
	if sc.TraceID() != testTraceID || sc.SpanID() != testSpanID || !sc.IsSampled() || !sc.IsRemote() {
		t.Fatalf("span context read back as %+v", sc)
	}
	var p peerv1.Check
	if err := proto.Unmarshal(b, &p); err != nil || !bytes.Equal(p.GetTrace(), tc[:]) {
		t.Fatalf("proto reads trace %x, %v", p.GetTrace(), err)
	}
	// A trace context of another length is ignored, not refused.
	odd := protowire.AppendBytes(protowire.AppendTag(bytes.Clone(old), fCheckTrace, protowire.BytesType), []byte{1, 2, 3})
	if err := back.parse(odd); err != nil || back.traced {
		t.Fatalf("a 3-byte trace context read as %+v, %v", back, err)
	}
}

// A node that does not know field 7 (it skips unknown fields, as every
// parser here does) reads a traced check as the untraced one.
func TestWireTraceSkippedByOlderReader(t *testing.T) {
	tc, _ := traceOf(spanCtx(trace.FlagsSampled))
	m := checkBatch{from: "a", id: 1, checks: []wireCheck{{key: "k", limit: toWireLimit(new(hourly(10))), cost: 1, trace: tc, traced: true}}}
	b := m.appendTo(nil)
	// An older reader: the same parser, with field 7 renumbered to one it
	// does not know.
	var older checkBatch
	if err := older.parse(renumberTrace(b)); err != nil || len(older.checks) != 1 || older.checks[0].traced || older.checks[0].key != "k" || older.checks[0].cost != 1 {
		t.Fatalf("older reader: %+v, %v", older, err)
	}
}

// renumberTrace rewrites the field trace (7) of each check of a batch as
// field 15, unknown to every reader here.
func renumberTrace(b []byte) []byte {
	var out []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		if num == fReqChecks && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			b = b[n:]
			var c []byte
			for len(v) > 0 {
				cn, ct, m := protowire.ConsumeTag(v)
				fl := protowire.ConsumeFieldValue(cn, ct, v[m:])
				if cn == fCheckTrace {
					cn = 15
				}
				c = protowire.AppendTag(c, cn, ct)
				c = append(c, v[m:m+fl]...)
				v = v[m+fl:]
			}
			out = protowire.AppendBytes(protowire.AppendTag(out, num, typ), c)
			continue
		}
		fl := protowire.ConsumeFieldValue(num, typ, b)
		out = append(protowire.AppendTag(out, num, typ), b[:fl]...)
		b = b[fl:]
	}
	return out
}
