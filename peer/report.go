package peer

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// Reports (PeerReport) carry how a request ended to the owner of its
// adaptive key, whose controller observes it.

// Reporter observes the reports other nodes send (forward.Router). It may
// be called concurrently.
type Reporter interface {
	// ReportFor observes q for the node from; with q.Final, whatever this
	// node's ring says. The key, limit, spec and outcome are validated.
	ReportFor(ctx context.Context, from string, q peermsg.ReportRequest) peermsg.ReportAnswer
}

// PeerReport observes a report for the node the call names, on the
// Reporter of ServerConfig (Unimplemented without one). A report with a
// bad key, limit, spec or outcome is refused (InvalidArgument).
func (s *Server) PeerReport(ctx context.Context, req *peerv1.PeerReportRequest) (*peerv1.PeerReportResponse, error) {
	if s.reporter == nil {
		return nil, status.Error(codes.Unimplemented, "peer: this node observes no reports")
	}
	if err := s.authorize(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	l, err := limitFromProto(req.GetLimit())
	if err == nil {
		err = bucket.CheckKey(req.GetKey())
	}
	spec := specFromProto(req.GetSpec())
	if err == nil {
		err = checkSpec(&spec)
	}
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "peer: report: "+err.Error())
	}
	if req.GetOutcome() > uint32(adaptive.Dropped) {
		return nil, status.Errorf(codes.InvalidArgument, "peer: report: outcome %d", req.GetOutcome())
	}
	scope := req.GetScope()
	if len(scope) > maxScopeLen {
		scope = ""
	}
	a := s.reporter.ReportFor(ctx, strings.Clone(req.GetFrom()), peermsg.ReportRequest{Key: req.GetKey(), Limit: l, Spec: spec,
		Scope: scope, Outcome: adaptive.Outcome(req.GetOutcome()), Latency: time.Duration(max(req.GetLatencyNs(), 0)), Final: req.GetFinal()})
	return &peerv1.PeerReportResponse{Redirect: a.Redirect, Limit: a.Limit, Owner: a.Owner}, nil
}

// maxScopeLen bounds a report's scope; a longer one is dropped.
const maxScopeLen = 128

// Report asks the member name to observe q, within Timeout.
func (p *Pool) Report(ctx context.Context, name string, q peermsg.ReportRequest) (peermsg.ReportAnswer, error) {
	c, err := p.conn(name, true)
	if err != nil {
		return peermsg.ReportAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	resp, err := c.rpc.PeerReport(ctx, &peerv1.PeerReportRequest{From: c.cfg.Self, Key: q.Key, Limit: limitToProto(&q.Limit),
		Spec: specToProto(&q.Spec), Scope: q.Scope, Outcome: uint32(q.Outcome), LatencyNs: int64(q.Latency), Final: q.Final})
	if err != nil {
		return peermsg.ReportAnswer{}, err
	}
	return peermsg.ReportAnswer{Redirect: resp.GetRedirect(), Limit: resp.GetLimit(), Owner: resp.GetOwner()}, nil
}
