package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// DefaultTokenName is the name of an admin token given without one.
const DefaultTokenName = "admin"

// Token is one admin bearer token and the name the audit log knows it by.
type Token struct {
	Name  string
	Token string
}

// minTokenLen is the shortest token ParseTokens accepts, in bytes.
const minTokenLen = 16

// ParseTokens parses an admin token file: one token a line, either bare
// (named DefaultTokenName) or "name:token"; blank lines and lines starting
// with # are skipped, and surrounding spaces trimmed. A name is letters,
// digits, '.', '_', '@' and '-', at most 64 bytes; a token is at least 16
// bytes without spaces. A file with no token, a bad line or a token given
// twice is an error naming the line (never the token).
func ParseTokens(data []byte) ([]Token, error) {
	var out []Token
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t := Token{Name: DefaultTokenName, Token: line}
		if name, tok, ok := strings.Cut(line, ":"); ok {
			t = Token{Name: strings.TrimSpace(name), Token: strings.TrimSpace(tok)}
		}
		if !validTokenName(t.Name) {
			return nil, fmt.Errorf("api: admin tokens: line %d: a name is 1 to 64 letters, digits, '.', '_', '@' or '-'", n)
		}
		if len(t.Token) < minTokenLen || strings.ContainsAny(t.Token, " \t") {
			return nil, fmt.Errorf("api: admin tokens: line %d: a token is at least %d bytes without spaces", n, minTokenLen)
		}
		if seen[t.Token] {
			return nil, fmt.Errorf("api: admin tokens: line %d: the same token is given twice", n)
		}
		seen[t.Token] = true
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("api: admin tokens: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("api: admin tokens: no token in the file")
	}
	return out, nil
}

func validTokenName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._@-", r)) {
			return false
		}
	}
	return true
}

// Tokens is the set of admin tokens a node accepts; Set replaces it (a
// rotation), and requests in flight finish under the set they started
// with. The zero value holds no token and refuses everything. It is safe
// for concurrent use.
type Tokens struct {
	set atomic.Pointer[[]hashedToken]
}

type hashedToken struct {
	name string
	sum  [sha256.Size]byte
}

// Set replaces the accepted tokens with ts.
func (t *Tokens) Set(ts []Token) {
	h := make([]hashedToken, len(ts))
	for i, tok := range ts {
		h[i] = hashedToken{name: tok.Name, sum: sha256.Sum256([]byte(tok.Token))}
	}
	t.set.Store(&h)
}

// Authenticate returns the name of the token equal to given. It compares
// SHA-256 digests in constant time against every token, without stopping
// at a match, so that the time taken says nothing of which token, if any,
// matched, nor of its length.
func (t *Tokens) Authenticate(given string) (name string, ok bool) {
	set := t.set.Load()
	if set == nil {
		return "", false
	}
	sum := sha256.Sum256([]byte(given))
	found := -1
	for i := range *set {
		if subtle.ConstantTimeCompare(sum[:], (*set)[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return (*set)[found].name, true
}

func (t *Tokens) configured() bool { return t != nil && t.set.Load() != nil }

type adminKey struct{}

// AdminName returns the name of the admin token the request in ctx
// authenticated with (RequireAdmin), and "" when none.
func AdminName(ctx context.Context) string {
	name, _ := ctx.Value(adminKey{}).(string)
	return name
}

// Codes of the answers RequireAdmin refuses with.
const (
	CodeUnauthenticated  = "UNAUTHENTICATED"
	CodePermissionDenied = "PERMISSION_DENIED"
)

// RequireAdmin serves next only to requests carrying "Authorization:
// Bearer <token>" with a token in tokens, putting the token's name in the
// request's context (AdminName). It refuses with 403 when tokens is nil or
// empty (the node has no admin token: --admin-token-file), 401 and
// "WWW-Authenticate: Bearer" when the header is missing or not a bearer
// token, and 403 when the token is not one of tokens.
func RequireAdmin(tokens *Tokens, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tokens.configured() {
			writeError(w, http.StatusForbidden, CodePermissionDenied,
				"this node has no admin token configured (start it with --admin-token-file): state-changing endpoints are off")
			return
		}
		scheme, given, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		given = strings.TrimSpace(given)
		if !ok || !strings.EqualFold(scheme, "Bearer") || given == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ringlimit"`)
			writeError(w, http.StatusUnauthorized, CodeUnauthenticated, "an admin token is required: Authorization: Bearer <token>")
			return
		}
		name, ok := tokens.Authenticate(given)
		if !ok {
			writeError(w, http.StatusForbidden, CodePermissionDenied, "the bearer token is not an admin token of this node")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), adminKey{}, name)))
	})
}
