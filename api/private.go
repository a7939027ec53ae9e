package api

import (
	"context"
	"regexp"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit/decide"
)

// With Config.PrivateReads, a caller without an admin token learns from a
// check's answer only what concerns its own limit: the answer carries no
// owner, owner address or policy version, and the scopes it names
// (scope, would_reject, the rate-limit headers, error messages) are cut
// to their kind ("tier", "route", "override", "global", "inline", "rls"),
// so that neither the cluster's members nor the policy's tier, route or
// override names can be read by sending checks. A caller with an admin
// token ("Authorization: Bearer <token>", over HTTP or as gRPC metadata)
// gets the whole answer.

// private reports whether an answer to a caller that sent the
// Authorization value auth must hide what is private.
func (a *API) private(auth string) bool {
	if !a.privReads {
		return false
	}
	if !a.admin.configured() {
		return true
	}
	scheme, given, ok := strings.Cut(auth, " ")
	given = strings.TrimSpace(given)
	if !ok || !strings.EqualFold(scheme, "Bearer") || given == "" {
		return true
	}
	_, ok = a.admin.Authenticate(given)
	return !ok
}

// privateGRPC is private for a gRPC call, from its "authorization"
// metadata.
func (a *API) privateGRPC(ctx context.Context) bool {
	if !a.privReads {
		return false
	}
	var auth string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			auth = v[0]
		}
	}
	return a.private(auth)
}

// hide removes from ans what a caller without an admin token may not read;
// its headers are then written with priv (see writeHeaders).
func hide(ans *decide.Answer) {
	ans.Owner, ans.OwnerAddr, ans.Version = "", "", ""
	ans.Scope = scopeKind(ans.Scope)
	if len(ans.WouldReject) > 0 {
		kinds := make([]string, len(ans.WouldReject))
		for i, s := range ans.WouldReject {
			kinds[i] = scopeKind(s)
		}
		ans.WouldReject = kinds
	}
}

// scopeKind cuts a scope to its kind: "tier:free" is "tier".
func scopeKind(scope string) string {
	kind, _, _ := strings.Cut(scope, ":")
	return kind
}

// scopeNames matches the scopes an error message may name.
var scopeNames = regexp.MustCompile(`\b(tier|route|override|rls):[^\s,;"]+`)

// policyNames matches the names of policies an error message may give.
var policyNames = regexp.MustCompile(`\bpolicy [^\s,;:"]+ `)

// hideNames cuts the scopes and policy names in an error message msg.
func hideNames(msg string) string {
	msg = scopeNames.ReplaceAllString(msg, "$1")
	return policyNames.ReplaceAllString(msg, "the policy ")
}

// message is err's message for a caller, with priv cut by hideNames.
func (a *API) message(err error, priv bool) string {
	if priv {
		return hideNames(err.Error())
	}
	return err.Error()
}

// Messages that replace, for a caller without an admin token, those of
// errors that may name members or addresses.
const (
	privateUnavailable = "no decision in time: the key's owner could not be reached"
	privateInternal    = "internal error"
)
