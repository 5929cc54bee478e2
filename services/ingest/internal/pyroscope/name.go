// Package pyroscope reads what Pyroscope clients send: the application name
// with its tags ("app.cpu{k=v,...}"), folded stacks, the push API's
// protobuf request, and the from/until times of /ingest.
package pyroscope

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error about a malformed input.
var ErrInvalid = errors.New("invalid input")

// MaxNameBytes bounds the name parameter ("app.cpu{tags}"); Pyroscope's own
// clients send well under a kilobyte.
const MaxNameBytes = 16 << 10

// MaxTags bounds the tags of one name.
const MaxTags = 64

// Tag is one key=value of a name, as sent.
type Tag struct{ Key, Value string }

// Name is a parsed name parameter.
type Name struct {
	// App is the application name without a known type suffix.
	App string
	// Suffix is the type suffix that was cut from the application name
	// ("cpu", "alloc_space", ...), or "".
	Suffix string
	Tags   []Tag
}

// suffixes Pyroscope clients append to the application name to say what a
// profile measures. Only these are cut from the name: "checkout.api" stays
// the application "checkout.api".
var suffixes = []string{
	"cpu", "itimer", "wall",
	"alloc_objects", "alloc_space", "inuse_objects", "inuse_space",
	"goroutines", "mutex_count", "mutex_duration", "block_count", "block_duration",
	"lock_count", "lock_duration", "alloc_in_new_tlab_objects", "alloc_in_new_tlab_bytes",
	"alloc_outside_tlab_objects", "alloc_outside_tlab_bytes",
}

// ParseName reads "app.suffix{key=value,...}". The tags part is optional;
// keys and values are trimmed of spaces and may not contain {},=; a tag with
// an empty value is dropped (Pyroscope does the same).
func ParseName(s string) (Name, error) {
	var n Name
	if len(s) > MaxNameBytes {
		return n, fmt.Errorf("%w: name is %d bytes, limit %d", ErrInvalid, len(s), MaxNameBytes)
	}
	app, tags, hasTags := strings.Cut(s, "{")
	app = strings.TrimSpace(app)
	if app == "" {
		return n, fmt.Errorf("%w: name %q has no application name: send name=app.cpu{key=value}", ErrInvalid, short(s))
	}
	if strings.ContainsAny(app, "}=,") || hasControl(app) {
		return n, fmt.Errorf("%w: application name %q contains one of }=, or a control character", ErrInvalid, short(app))
	}
	if i := strings.LastIndexByte(app, '.'); i > 0 {
		for _, suf := range suffixes {
			if app[i+1:] == suf {
				n.Suffix, app = suf, app[:i]
				break
			}
		}
	}
	n.App = app
	if !hasTags {
		return n, nil
	}
	tags, ok := strings.CutSuffix(strings.TrimSpace(tags), "}")
	if !ok {
		return n, fmt.Errorf("%w: name %q: tags start with { but do not end with }", ErrInvalid, short(s))
	}
	for tags != "" {
		var kv string
		kv, tags, _ = strings.Cut(tags, ",")
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return n, fmt.Errorf("%w: tag %q is not key=value", ErrInvalid, short(kv))
		}
		if strings.ContainsAny(k+v, "{}=") || hasControl(k+v) {
			return n, fmt.Errorf("%w: tag %q contains one of {}= or a control character", ErrInvalid, short(kv))
		}
		if v == "" {
			continue
		}
		if len(n.Tags) == MaxTags {
			return n, fmt.Errorf("%w: more than %d tags", ErrInvalid, MaxTags)
		}
		n.Tags = append(n.Tags, Tag{Key: k, Value: v})
	}
	return n, nil
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// short cuts s for an error message.
func short(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// ParseTime reads a from/until value: a Unix time in seconds, milliseconds,
// microseconds or nanoseconds (told apart by magnitude: Pyroscope's Go SDK
// sends nanoseconds, older clients seconds), or RFC 3339. Empty is the zero
// time.
func ParseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t, terr := time.Parse(time.RFC3339Nano, s)
		if terr != nil {
			return time.Time{}, fmt.Errorf("%w: time %q is neither a Unix time nor RFC 3339", ErrInvalid, short(s))
		}
		return t, nil
	}
	switch {
	case n < 0:
		return time.Time{}, fmt.Errorf("%w: time %d is negative", ErrInvalid, n)
	case n < 1e11: // seconds until the year 5138
		return time.Unix(n, 0), nil
	case n < 1e14:
		return time.UnixMilli(n), nil
	case n < 1e17:
		return time.UnixMicro(n), nil
	}
	return time.Unix(0, n), nil
}
