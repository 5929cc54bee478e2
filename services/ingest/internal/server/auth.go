package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Auth holds what a request may authenticate with. Tokens are kept as
// their SHA-256 only: a lookup compares hashes, so neither the map's
// timing nor a heap dump gives a token away.
type Auth struct {
	tokens    map[[32]byte]string // hash of the token -> tenant ("" for none)
	basicUser [32]byte
	basicPass [32]byte
	basic     bool
}

// NewAuth accepts the tokens (token -> tenant) and, when user is not empty,
// HTTP basic auth with user and pass.
func NewAuth(tokens map[string]string, user, pass string) *Auth {
	a := &Auth{tokens: make(map[[32]byte]string, len(tokens))}
	for tok, tenant := range tokens {
		a.tokens[sha256.Sum256([]byte(tok))] = tenant
	}
	if user != "" {
		a.basic = true
		a.basicUser, a.basicPass = sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
	}
	return a
}

// Enabled reports whether requests must authenticate.
func (a *Auth) Enabled() bool { return a != nil && (len(a.tokens) > 0 || a.basic) }

// Check returns the tenant of r's credentials and whether they are
// accepted: a token as "Authorization: Bearer <token>" or as the password
// of basic auth (any user: what Pyroscope SDKs configured with a user and
// password send), or the basic auth user and password.
func (a *Auth) Check(r *http.Request) (tenant string, ok bool) {
	if !a.Enabled() {
		return "", true
	}
	var secret string
	if tok, isBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); isBearer {
		secret = strings.TrimSpace(tok)
	} else if u, p, isBasic := r.BasicAuth(); isBasic {
		if a.basic {
			hu, hp := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
			if subtle.ConstantTimeCompare(hu[:], a.basicUser[:])&subtle.ConstantTimeCompare(hp[:], a.basicPass[:]) == 1 {
				return "", true
			}
		}
		secret = p
	}
	if secret == "" {
		return "", false
	}
	tenant, ok = a.tokens[sha256.Sum256([]byte(secret))]
	return tenant, ok
}
