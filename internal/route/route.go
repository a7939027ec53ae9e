// Package route normalises request paths before they are matched against
// route limits, so that a route limit cannot be skipped by spelling the
// same path another way. Policy requests (HTTP, gRPC, forward-auth) and
// Envoy RLS descriptors that carry paths all go through Normalize.
package route

import "strings"

// Normalize returns the canonical form of the request path p:
//
//   - the query and fragment ('?' or '#' and what follows) are dropped;
//   - a path that does not begin with '/' gets one;
//   - each segment loses its path parameters (';' and what follows, so
//     "/login;jsessionid=1" is "/login");
//   - percent-escapes of unreserved characters (letters, digits, '-',
//     '.', '_', '~') are decoded ("%6Cogin" is "login"); every other
//     escape is kept, its hex digits upper-cased ("%2f" is "%2F": an
//     encoded '/' is not a separator);
//   - empty segments (repeated slashes) and "." segments are dropped, and
//     ".." removes the segment before it (never above the root);
//   - no trailing slash is kept, except for "/" itself.
//
// Normalize is idempotent (Normalize(Normalize(p)) == Normalize(p)), never
// panics. Its result is at most len(p) + 1 bytes long but for a '%' that
// starts no escape, which becomes "%25".
func Normalize(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if isCanonical(p) {
		return p
	}
	out := make([]byte, 0, len(p)+1)
	var seg []byte
	for rest := p; ; {
		var s string
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			s = rest
		} else {
			s, rest = rest[:i], rest[i+1:]
		}
		if j := strings.IndexByte(s, ';'); j >= 0 {
			s = s[:j]
		}
		seg = decode(seg[:0], s)
		switch string(seg) {
		case "", ".":
		case "..":
			if k := strings.LastIndexByte(string(out), '/'); k >= 0 {
				out = out[:k]
			}
		default:
			out = append(out, '/')
			out = append(out, seg...)
		}
		if i < 0 {
			break
		}
	}
	if len(out) == 0 {
		return "/"
	}
	return string(out)
}

// isCanonical reports whether p (without query or fragment) is already
// what Normalize returns, so that the common case allocates nothing.
func isCanonical(p string) bool {
	if p == "/" {
		return true
	}
	if len(p) < 2 || p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			switch c := p[i]; c {
			case ';', '%':
				return false
			case '/':
			default:
				continue
			}
		}
		switch p[segStart:i] {
		case "", ".", "..":
			return false
		}
		segStart = i + 1
	}
	return true
}

// decode appends s to dst with the escapes of unreserved characters
// decoded, the hex digits of the others upper-cased, and a '%' that starts
// no escape written as "%25" (so that decoding never makes a new escape).
func decode(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			dst = append(dst, c)
			continue
		}
		if i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			if v := unhex(s[i+1])<<4 | unhex(s[i+2]); unreserved(v) {
				dst = append(dst, v)
			} else {
				dst = append(dst, '%', upper(s[i+1]), upper(s[i+2]))
			}
			i += 2
			continue
		}
		dst = append(dst, "%25"...)
	}
	return dst
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
