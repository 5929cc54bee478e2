package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/selector"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// paramError is a client mistake: HTTP 400 naming the parameter.
type paramError struct {
	param string
	msg   string
}

func (e *paramError) Error() string { return fmt.Sprintf("parameter %q: %s", e.param, e.msg) }

func badParam(param, format string, args ...any) error {
	return &paramError{param: param, msg: fmt.Sprintf(format, args...)}
}

var relative = regexp.MustCompile(`^now(?:-([0-9]{1,6})(s|m|h|d|w))?$`)

// Times must lie in [minTime, maxTime): OpenSearch's dates and Go's
// nanosecond arithmetic both hold them, and nothing profiled lies outside.
var (
	minTime = time.Unix(0, 0).UTC()
	maxTime = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

// maxRelative bounds "now-<n><unit>", so n times the unit cannot overflow.
const maxRelative = 100 * 365 * 24 * time.Hour

// parseTime reads RFC 3339, unix milliseconds, "now" or "now-<n><s|m|h|d|w>".
func parseTime(param, s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	var t time.Time
	if m := relative.FindStringSubmatch(s); m != nil {
		if m[1] == "" {
			return now, nil
		}
		n, _ := strconv.Atoi(m[1])
		unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour}[m[2]]
		if time.Duration(n) > maxRelative/unit {
			return time.Time{}, badParam(param, "%q reaches back more than 100 years", s)
		}
		t = now.Add(-time.Duration(n) * unit)
	} else if rt, err := time.Parse(time.RFC3339Nano, s); err == nil {
		t = rt.UTC()
	} else if ms, err := strconv.ParseInt(s, 10, 64); err == nil && len(s) >= 10 && len(s) <= 14 {
		t = time.UnixMilli(ms).UTC()
	} else {
		return time.Time{}, badParam(param, "cannot parse %q: use RFC 3339 or now-1h", truncate(s, 64))
	}
	if t.Before(minTime) || !t.Before(maxTime) {
		return time.Time{}, badParam(param, "%s is outside the years 1970 to 2261", t.Format(time.RFC3339))
	}
	return t, nil
}

// parseRange reads fromParam/toParam (defaults now-1h and now) and checks the
// range is ordered and not longer than maxRange.
func parseRange(q url.Values, fromParam, toParam string, now time.Time, maxRange time.Duration) (store.TimeRange, error) {
	fromS, toS := q.Get(fromParam), q.Get(toParam)
	if fromS == "" {
		fromS = "now-1h"
	}
	if toS == "" {
		toS = "now"
	}
	from, err := parseTime(fromParam, fromS, now)
	if err != nil {
		return store.TimeRange{}, err
	}
	to, err := parseTime(toParam, toS, now)
	if err != nil {
		return store.TimeRange{}, err
	}
	if !from.Before(to) {
		return store.TimeRange{}, badParam(fromParam, "%s=%s is not before %s=%s: swap them", fromParam, from.Format(time.RFC3339), toParam, to.Format(time.RFC3339))
	}
	if d := to.Sub(from); d > maxRange {
		return store.TimeRange{}, badParam(fromParam, "range of %s is longer than the maximum %s (STACKSTREAM_QUERY_MAX_RANGE): narrow it", d, maxRange)
	}
	return store.TimeRange{From: from, To: to, Now: now}, nil
}

// parseSelection reads the profile type, the selector in selParam and the
// range in fromParam and toParam.
func (a *API) parseSelection(q url.Values, selParam, fromParam, toParam string) (store.Selection, error) {
	typ, err := parseType(q)
	if err != nil {
		return store.Selection{}, err
	}
	sel, err := parseSelector(q, selParam)
	if err != nil {
		return store.Selection{}, err
	}
	tr, err := parseRange(q, fromParam, toParam, a.opts.Now(), a.opts.MaxRange)
	if err != nil {
		return store.Selection{}, err
	}
	return store.Selection{Type: typ, Selector: sel, Range: tr}, nil
}

// parseType reads the profile type, cpu by default.
func parseType(q url.Values) (record.ProfileType, error) {
	s := q.Get("type")
	if s == "" {
		return record.ProfileCPU, nil
	}
	t, err := record.ParseProfileType(s)
	if err != nil {
		return "", badParam("type", "unknown profile type %q: use cpu, memory, heap, alloc or offcpu", truncate(s, 64))
	}
	return t, nil
}

func parseSelector(q url.Values, param string) (selector.Selector, error) {
	sel, err := selector.Parse(q.Get(param))
	if err != nil {
		return nil, badParam(param, "%s (example: {service=\"checkout\",host=~\"web-.*\"})", strings.TrimPrefix(err.Error(), selector.ErrSyntax.Error()+" "))
	}
	return sel, nil
}

// parseInt reads an optional integer in [min, max].
func parseInt(q url.Values, param string, def, min, max int) (int, error) {
	s := q.Get(param)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < min || n > max {
		return 0, badParam(param, "%q is not an integer from %d to %d", truncate(s, 64), min, max)
	}
	return n, nil
}

// parseStep reads a step as a Go duration ("5m") or seconds ("300"), at
// most maxStep.
func parseStep(q url.Values, maxStep time.Duration) (time.Duration, error) {
	s := q.Get("step")
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, err2 := strconv.ParseFloat(s, 64)
		if err2 != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return 0, badParam("step", "cannot parse %q: use a duration such as 60s or 5m", truncate(s, 64))
		}
		if secs > maxStep.Seconds() {
			return 0, badParam("step", "%q is longer than the longest range %s (STACKSTREAM_QUERY_MAX_RANGE)", truncate(s, 64), maxStep)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, badParam("step", "%q must be positive", truncate(s, 64))
	}
	if d > maxStep {
		return 0, badParam("step", "%q is longer than the longest range %s (STACKSTREAM_QUERY_MAX_RANGE)", truncate(s, 64), maxStep)
	}
	return d, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// writeError picks the status for err and writes the agreed error body.
// Only a client's own mistakes (400) are explained in the answer: anything
// else would show OpenSearch's paths, index names and error bodies to whoever
// can reach the port, so the answer carries the request ID and the log the
// detail under the same ID.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, id string, err error) {
	var pe *paramError
	status, param := http.StatusInternalServerError, ""
	msg := "internal error: see the query service's log for request " + id
	switch {
	case errors.As(err, &pe):
		status, param, msg = http.StatusBadRequest, pe.param, err.Error()
	case errors.Is(err, store.ErrRegexpTooComplex):
		status, param = http.StatusBadRequest, "query"
		msg = "a regular expression of the selector is too complex for OpenSearch (more than 10000 automaton states once determinized): simplify it, e.g. fewer alternatives under a repetition"
	case errors.Is(err, store.ErrTooManyStacks):
		// The message names the range and the limit, nothing of OpenSearch.
		status, msg = http.StatusUnprocessableEntity, err.Error()
		a.logger.Warn("selection over the edge stacks limit", "request_id", id, "path", r.URL.Path, "err", err)
	case errors.Is(err, store.ErrTimeout) || errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
		msg = fmt.Sprintf("query took longer than %s (STACKSTREAM_QUERY_TIMEOUT): narrow the range or the selector (request %s)", a.opts.Timeout, id)
		a.logger.Warn("query timed out", "request_id", id, "path", r.URL.Path, "err", err)
	case errors.Is(err, store.ErrPartial):
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
		msg = fmt.Sprintf("OpenSearch answered from part of the data only (some shards failed, e.g. an index being moved or replaced): try again (request %s)", id)
		a.logger.Warn("partial answer refused", "request_id", id, "path", r.URL.Path, "err", err)
	case errors.Is(err, store.ErrNotFound):
		status = http.StatusNotFound
		msg = "not found: see the query service's log for request " + id
		a.logger.Warn("query found nothing to read", "request_id", id, "path", r.URL.Path, "err", err)
	case r.Context().Err() != nil:
		// The client went away: nobody reads the answer, nothing failed here.
		status = 499
		a.logger.Debug("client went away", "request_id", id, "path", r.URL.Path, "err", err)
	default:
		a.logger.Error("query failed", "request_id", id, "path", r.URL.Path, "query", r.URL.RawQuery, "err", err)
		a.metrics.errors.Inc()
	}
	writeJSON(w, status, errorBody{Error: msg, Parameter: param, RequestID: id})
}

type errorBody struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// newRequestID names one request in the answer and the log. It is made
// here, never taken from the request, so a client cannot forge log lines
// or make two requests share an ID.
func newRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
