package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// handleRLSJSON serves POST /json as envoyproxy/ratelimit's HTTP port does:
// the body is a RateLimitRequest in protobuf's JSON mapping, decided by
// the same ShouldRateLimit as the gRPC service, and the answer is the
// RateLimitResponse in that mapping, 200 when the overall code is OK and
// 429 when it is OVER_LIMIT. A request the service refuses answers
// {code, message}: 400 for bad input, 503 when the cluster cannot decide.
func (a *API) handleRLSJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusBadRequest, CodeInvalidArgument, fmt.Sprintf("body: larger than %d bytes", MaxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, "body: "+err.Error())
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, "body: not a RateLimitRequest: "+err.Error())
		return
	}
	resp, err := a.rls.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.InvalidArgument:
			writeError(w, http.StatusBadRequest, CodeInvalidArgument, st.Message())
		case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
			writeError(w, http.StatusServiceUnavailable, CodeUnavailable, st.Message())
		default:
			writeError(w, http.StatusInternalServerError, CodeInternal, st.Message())
		}
		return
	}
	raw, err := protojson.Marshal(resp)
	var out bytes.Buffer
	if err == nil {
		// protojson varies its spacing from build to build on purpose:
		// compact it, so that the same answer is always the same bytes.
		err = json.Compact(&out, raw)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeInternal, err.Error())
		return
	}
	code := http.StatusOK
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		code = http.StatusTooManyRequests
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	out.WriteByte('\n')
	w.Write(out.Bytes())
}
