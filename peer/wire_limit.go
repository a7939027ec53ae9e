package peer

import (
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// wireLimit is a Limit as the wire carries it (message Limit). It is the
// one conversion between bucket.Limit and the peer API: the hand-written
// codec writes it, and the generated messages are built from it.
type wireLimit struct {
	alg          uint32
	limit, perNs int64
	burst        int64
	// A calendar window's unit, first weekday and zone (cal 0: none).
	cal, week uint32
	zone      string
}

func toWireLimit(l *bucket.Limit) wireLimit {
	w := wireLimit{alg: uint32(l.Algorithm()), limit: l.Count(), perNs: int64(l.Per()), burst: l.Burst()}
	if c := l.Calendar(); c.Unit != bucket.NoCalendar {
		w.cal, w.week = uint32(c.Unit), uint32(c.WeekStart)
		if w.zone = c.Zone(); w.zone == "UTC" {
			w.zone = ""
		}
	}
	return w
}

// toLimit builds the bucket.Limit, validating it.
func (w *wireLimit) toLimit() (bucket.Limit, error) {
	if w.alg > 255 {
		return bucket.Limit{}, fmt.Errorf("algorithm %d", w.alg)
	}
	if w.cal != 0 {
		if w.alg != uint32(bucket.FixedWindow) || w.cal > 255 || w.week > 6 {
			return bucket.Limit{}, fmt.Errorf("calendar %d (week start %d) of algorithm %d", w.cal, w.week, w.alg)
		}
		loc, err := bucket.LoadZone(w.zone)
		if err != nil {
			return bucket.Limit{}, err
		}
		return bucket.NewCalendarLimit(w.limit, bucket.Calendar{Unit: bucket.CalendarUnit(w.cal), Loc: loc, WeekStart: time.Weekday(w.week)})
	}
	return bucket.NewLimit(bucket.Algorithm(w.alg), w.limit, time.Duration(w.perNs), w.burst)
}

func (w *wireLimit) toProto() *peerv1.Limit {
	return &peerv1.Limit{Algorithm: w.alg, Limit: w.limit, PerNs: w.perNs, Burst: w.burst, Calendar: w.cal, WeekStart: w.week, Timezone: w.zone}
}

func limitToProto(l *bucket.Limit) *peerv1.Limit {
	w := toWireLimit(l)
	return w.toProto()
}

func limitFromProto(p *peerv1.Limit) (bucket.Limit, error) {
	if p == nil {
		return bucket.Limit{}, errors.New("missing limit")
	}
	return (&wireLimit{alg: p.GetAlgorithm(), limit: p.GetLimit(), perNs: p.GetPerNs(), burst: p.GetBurst(),
		cal: p.GetCalendar(), week: p.GetWeekStart(), zone: p.GetTimezone()}).toLimit()
}

func (l *wireLimit) size() int {
	return varintSize(fLimitAlgorithm, uint64(l.alg)) + varintSize(fLimitLimit, uint64(l.limit)) +
		varintSize(fLimitPerNs, uint64(l.perNs)) + varintSize(fLimitBurst, uint64(l.burst)) +
		varintSize(fLimitCalendar, uint64(l.cal)) + varintSize(fLimitWeekStart, uint64(l.week)) + stringSize(fLimitTimezone, l.zone)
}

func (l *wireLimit) appendTo(b []byte) []byte {
	b = appendVarint(b, fLimitAlgorithm, uint64(l.alg))
	b = appendVarint(b, fLimitLimit, uint64(l.limit))
	b = appendVarint(b, fLimitPerNs, uint64(l.perNs))
	b = appendVarint(b, fLimitBurst, uint64(l.burst))
	b = appendVarint(b, fLimitCalendar, uint64(l.cal))
	b = appendVarint(b, fLimitWeekStart, uint64(l.week))
	return appendString(b, fLimitTimezone, l.zone)
}
