package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
)

// jsonError turns a decoding error into a message naming the field.
// textField names the body's one field decoded by an
// encoding.TextUnmarshaler ("" if it has none): encoding/json returns such
// a field's error as it is, without the field's name.
func jsonError(err error, textField string) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return fmt.Errorf("%s: expected %v, got JSON %s", field, typeErr.Type, typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("body: malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.EOF):
		return errors.New("body: empty, expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("body: malformed JSON: unexpected end")
	case strings.HasPrefix(err.Error(), "json: "):
		// DisallowUnknownFields: `json: unknown field "x"`.
		return fmt.Errorf("body: %v", err)
	case textField != "":
		return fmt.Errorf("%s: %w", textField, err)
	}
	return fmt.Errorf("body: %v", err)
}

// invalidCode is the code of a 400: KEY_TOO_LONG for a key past the
// limit, INVALID_ARGUMENT otherwise.
func invalidCode(err error) string {
	if errors.Is(err, bucket.ErrKeyTooLong) {
		return CodeKeyTooLong
	}
	return CodeInvalidArgument
}

// writeCheckError writes the answer to a check that failed with err;
// with priv (see API.private), without the names of members, addresses,
// policies and scopes.
func (a *API) writeCheckError(w http.ResponseWriter, err error, priv bool) {
	switch {
	case errors.Is(err, forward.ErrInvalid):
		writeError(w, http.StatusBadRequest, invalidCode(err), a.message(err, priv))
	case errors.Is(err, forward.ErrUnavailable):
		msg := err.Error()
		if priv {
			msg = privateUnavailable
		}
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, msg)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller gave up; nothing was decided for it.
		a.log.Debug("check abandoned", "err", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
	default:
		a.log.Error("check failed", "err", err)
		msg := err.Error()
		if priv {
			msg = privateInternal
		}
		writeError(w, http.StatusInternalServerError, CodeInternal, msg)
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, &ErrorResponse{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
