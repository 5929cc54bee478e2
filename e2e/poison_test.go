package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestPoison is the hostile-input suite of issue 11. It runs the real
// symbolizer, indexer, rollup and query binaries under their own prefix and
// produces each bad record to profiles.raw (the symbolizer's input) and to
// profiles.symbolized (the indexer's and the rollup's), one case at a time,
// waiting after each until every consumer has committed past it, so a consumer
// that dies or stalls is caught in the case that did it. Then it checks that
// nothing was lost (legitimate records count exactly in the query API), that
// every bad record is in the DLQ with a categorized reason, that no index is
// dated outside the retention window, that every consumer is the process it
// started as, and each consumer's peak RSS.
func TestPoison(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	osURL := testenv.OpenSearchURL(t)
	bin := buildPoisonBinaries(t)
	name := testenv.Name(t, "e2e-")
	started := time.Now()

	// Kept after a failed run: the consumers' full logs are what tell the
	// file and line of a panic (the test log only gets their heads and tails).
	logDir, err := os.MkdirTemp("", name+"-logs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("service logs in %s (kept when the test fails)", logDir)
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(logDir)
		}
	})

	debuginfod := newSlowDebuginfod(t, 10*time.Millisecond)
	queryAddr := freeAddr(t)
	env := []string{
		"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"STACKSTREAM_KAFKA_TOPIC_PREFIX=" + name + ".",
		"STACKSTREAM_OPENSEARCH_URL=" + osURL,
		"STACKSTREAM_OPENSEARCH_INDEX_PREFIX=" + name + "-",
		"STACKSTREAM_OPENSEARCH_INDEX_REFRESH_INTERVAL=1s",
		"STACKSTREAM_CTL_PARTITIONS=2",
		"STACKSTREAM_SYMBOLIZER_GROUP=" + name + "-symbolizer",
		"STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID=" + name + "-symbolizer-0",
		"STACKSTREAM_SYMBOLIZER_DEBUGINFOD_URLS=" + debuginfod.url,
		"STACKSTREAM_SYMBOLIZER_DEBUG_DIRS=" + t.TempDir(),
		"STACKSTREAM_INDEXER_GROUP=" + name + "-indexer",
		"STACKSTREAM_INDEXER_RETENTION_DAYS=" + strconv.Itoa(poisonRetentionDays),
		"STACKSTREAM_ROLLUP_GROUP=" + name + "-rollup",
		"STACKSTREAM_ROLLUP_MAX_AGE=" + strconv.Itoa(poisonRetentionDays*24) + "h",
		"STACKSTREAM_ROLLUP_ALLOWED_LATENESS=5s",
		// The rollup writes the minute windows of a quiet partition after
		// this long; the test's records all fall in the last minutes.
		"STACKSTREAM_ROLLUP_IDLE_FLUSH=3s",
		"STACKSTREAM_QUERY_LISTEN_ADDR=" + queryAddr,
	}
	t.Cleanup(func() { cleanup(t, brokers, name, osURL) })
	// Registered before the services start, so it runs after they stopped
	// (a group with members cannot be deleted).
	t.Cleanup(func() {
		cl, err := kafka.NewClient(context.Background(), kafka.Config{Brokers: brokers, DialTimeout: 5 * time.Second})
		if err == nil {
			kadm.NewClient(cl).DeleteGroups(context.Background(), name+"-symbolizer", name+"-indexer", name+"-rollup")
			cl.Close()
		}
	})

	ctl := exec.Command(filepath.Join(bin, "stackctl"), "init")
	ctl.Env = append(os.Environ(), env...)
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("stackctl init: %v\n%s", err, out)
	}

	topics := record.TopicsFor(name + ".")
	svcs := map[string]*service{}
	for _, s := range []string{"stackstream-symbolizer", "stackstream-indexer", "stackstream-rollup", "stackstream-query"} {
		svcs[s] = startLogged(t, filepath.Join(bin, s), logDir, append(env, "STACKSTREAM_LISTEN_ADDR="+freeAddr(t)))
	}
	rssCtx, stopRSS := context.WithCancel(context.Background())
	defer stopRSS()
	go watchRSS(rssCtx, svcs)
	consumers := []*consumer{
		{svc: svcs["stackstream-symbolizer"], group: name + "-symbolizer", topic: topics.ProfilesRaw},
		{svc: svcs["stackstream-indexer"], group: name + "-indexer", topic: topics.ProfilesSymbolized},
		// The rollup commits an offset only once every window holding a
		// record below it is written and evicted, which takes event time
		// (its watermark) to move on by lateness + retention; what it has
		// handled travels in the commit metadata as next=.
		{svc: svcs["stackstream-rollup"], group: name + "-rollup", topic: topics.ProfilesSymbolized, rollup: true},
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cl, err := kafka.NewClient(ctx, kafka.Config{Brokers: brokers, DialTimeout: 10 * time.Second},
		// The junk and large cases are bigger than franz-go's default 1 MB
		// batch; the broker takes 16 MiB (deploy/local/kafka.sh).
		kgo.ProducerBatchMaxBytes(15<<20),
		kgo.MaxBufferedBytes(256<<20),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	k := &kafkaView{brokers: brokers, adm: adm}

	base := "http://" + queryAddr + "/api/v1/"
	waitFor(ctx, t, "query service /readyz", func() bool {
		resp, err := http.Get("http://" + queryAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	var produced []*producedRecord
	// run produces each path's records of c, then waits for every consumer.
	run := func(t *testing.T, c *poisonCase) {
		if c.debuginfo != nil {
			recs := c.debuginfo(t)
			for _, r := range recs {
				r.Topic = topics.Debuginfo
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce %s to %s: %v", c.name, topics.Debuginfo, err)
			}
			t.Logf("debuginfo: %d records, %d bytes", len(recs), totalBytes(recs))
		}
		for _, path := range c.paths() {
			recs, cpu := c.build(t, c.host(path))
			for _, r := range recs {
				r.Topic = topics.ProfilesRaw
				if path == pathSym {
					r.Topic = topics.ProfilesSymbolized
				}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatalf("produce %s (%d bytes) to %s: %v", c.name, len(r.Value), r.Topic, err)
				}
				produced = append(produced, &producedRecord{c: c, path: path, host: c.host(path), rec: r})
			}
			t.Logf("%s: %d record(s) to %s, %d bytes, %d ns of CPU", path, len(recs), recs[0].Topic, totalBytes(recs), cpu)
			c.cpu[path] = cpu
		}
		drain(ctx, t, k, consumers, c)
	}
	cases := poisonCases(t)
	for _, c := range cases {
		t.Run("case/"+c.name, func(t *testing.T) { run(t, c) })
	}
	// After all the poison, a valid record of now must still be indexed,
	// rolled up and queryable.
	good := &poisonCase{name: "good", want: mustCount, build: goodRecords(time.Now())}
	good.init()
	t.Run("case/good", func(t *testing.T) { run(t, good) })
	cases = append(cases, good)

	// Every DLQ record is attributed to its case by its key (the host).
	dlq := readAll(ctx, t, brokers, topics.DLQ)
	outcomes := attribute(t, cases, dlq)

	// Totals: what a consumer did not dead-letter must count exactly.
	from, to := started.Add(-15*time.Minute), time.Now().Add(15*time.Minute)
	checkTotals(ctx, t, base, from, to, cases, outcomes, consumers)

	// The rollup dead-letters documents OpenSearch refuses when it writes a
	// window, which the totals waited for: read the DLQ again for reasons.
	dlq = readAll(ctx, t, brokers, topics.DLQ)
	outcomes = attribute(t, cases, dlq)
	t.Run("dlq", func(t *testing.T) { checkDLQ(t, topics.ProfilesRaw, cases, outcomes, produced, dlq) })

	// Hostile data stored does not break the reading side either.
	t.Run("query-api", func(t *testing.T) {
		for _, u := range []string{
			"labels",
			"labels/comm/values?type=cpu" + rangeParams(from, to),
			"search?q=poison" + rangeParams(from, to),
			"search?q=blob" + rangeParams(from, to),
			"top?type=cpu&limit=20" + rangeParams(from, to),
			"flamegraph?type=cpu" + rangeParams(from, to),
			"series?type=cpu&group_by=host" + rangeParams(from, to),
			"diff?type=cpu&base=" + url.QueryEscape(`{host="poison-good-raw"}`) + "&compare=" + url.QueryEscape(`{host="poison-large-profile-sym"}`) + rangeParams(from, to),
		} {
			if _, err := getBody(base + u); err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("lag", func(t *testing.T) {
		for _, c := range consumers {
			if c.broken != "" {
				t.Errorf("%s: %s", c.svc.base, c.broken)
				continue
			}
			lag, err := k.lag(ctx, c)
			if err != nil || lag != 0 {
				t.Errorf("%s: group %s lag on %s = %d (%v), want 0", c.svc.base, c.group, c.topic, lag, err)
			}
		}
	})
	t.Run("alive", func(t *testing.T) {
		for _, s := range svcs {
			if st := s.state(); st != "" {
				t.Errorf("%s (pid %d) is not the process it started as: %s", s.base, s.cmd.Process.Pid, st)
			}
			// A recover at the record boundary is the last line, not the
			// fix: a panic caught there still names a bug.
			for _, line := range strings.Split(readFile(s.log), "\n") {
				if strings.Contains(strings.ToLower(line), "panic") {
					t.Errorf("%s logged a panic: %s", s.base, cut(line, 1000))
					break
				}
			}
		}
	})
	t.Run("indices", func(t *testing.T) { checkIndices(t, osURL, name+"-") })
	t.Run("memory", func(t *testing.T) {
		for _, s := range []string{"stackstream-symbolizer", "stackstream-indexer", "stackstream-rollup", "stackstream-query"} {
			hwm, ok := svcs[s].peakRSS()
			if !ok {
				hwm = svcs[s].peak.Load()
				t.Logf("%s exited: peak RSS (VmHWM) at least %d MiB, the last seen", s, hwm>>20)
			} else {
				t.Logf("%s peak RSS (VmHWM) %d MiB", s, hwm>>20)
			}
			if s != "stackstream-query" && hwm >= 1<<30 {
				t.Errorf("%s peak RSS %d MiB, want under 1 GiB", s, hwm>>20)
			}
		}
	})
	n, peak := debuginfod.stats()
	t.Logf("debuginfod stub: %d lookups, at most %d at once", n, peak)
}

// poisonRetentionDays is the indexer's retention and the rollup's maximum
// profile age in this test: indices may be dated from today minus this to
// tomorrow.
const poisonRetentionDays = 7

type path string

const (
	pathRaw path = "raw" // produced to profiles.raw, through the symbolizer
	pathSym path = "sym" // produced to profiles.symbolized directly
)

type want int

const (
	// mustDLQ: each path is dead-lettered, on raw by the symbolizer or by
	// both the indexer and the rollup, on sym by both.
	mustDLQ want = iota
	// mustCount: nothing dead-lettered, the CPU counts exactly in the flame
	// graph (indexer) and the series (rollup).
	mustCount
	// either: each of the indexer and the rollup dead-letters it (or the
	// symbolizer does before them) with an expected reason, or counts it
	// exactly; never loses it silently.
	either
)

func (w want) String() string {
	return [...]string{"must be dead-lettered", "must count", "dead-lettered or counted"}[w]
}

type poisonCase struct {
	name    string
	rawOnly bool
	want    want
	reasons []string // what a DLQ reason of this case must contain (one of)
	// build returns the records (no topic yet) of one path and the CPU
	// nanoseconds they carry.
	build func(t *testing.T, host string) ([]*kgo.Record, int64)
	// hostFor overrides the host of a path (the long-host case).
	hostFor func(path) string
	// debuginfo are records for the debuginfo topic, produced first.
	debuginfo func(t *testing.T) []*kgo.Record
	// frames must be in the flame graph of a counted path, noFrames not.
	frames, noFrames []string
	drain            time.Duration // how long the consumers may take; default 90s

	cpu map[path]int64
}

func (c *poisonCase) init() {
	c.cpu = map[path]int64{}
	if c.drain == 0 {
		// Generous: the machine is shared, and a small record can wait
		// behind the rollup's write of a large profile's windows.
		c.drain = 90 * time.Second
	}
}

func (c *poisonCase) paths() []path {
	if c.rawOnly {
		return []path{pathRaw}
	}
	return []path{pathRaw, pathSym}
}

func (c *poisonCase) host(p path) string {
	if c.hostFor != nil {
		return c.hostFor(p)
	}
	return "poison-" + c.name + "-" + string(p)
}

// selector selects one path's host in the query API; a host over the
// caps may be stored cut, so it is matched by its start.
func (c *poisonCase) selector(p path) string {
	h := c.host(p)
	if len(h) > 64 {
		return `{host=~"` + regexp.QuoteMeta(h[:40]) + `.*"}`
	}
	return `{host="` + h + `"}`
}

// Reasons are the errors' own texts (schemas/record and the rollup's), so a
// wrapped sentinel anywhere in the message counts.
var (
	reasonNotGzip  = record.ErrNotGzip.Error()
	reasonNotPprof = record.ErrNotPprof.Error()
	reasonTooLarge = record.ErrTooLarge.Error()
	reasonInvalid  = record.ErrInvalidProfile.Error()
	reasonSchema   = record.ErrUnknownSchemaVersion.Error()
	reasonHeader   = record.ErrMissingHeader.Error()
	reasonTime     = record.ErrTimeOutOfRange.Error()
)

func poisonCases(t *testing.T) []*poisonCase {
	now := time.Now()
	rng := rand.New(rand.NewChaCha8([32]byte{'p', 'o', 'i', 's', 'o', 'n'}))
	genuineID, mismatchID := randomHex(rng, 20), randomHex(rng, 20)
	bombIDs := []string{randomHex(rng, 20), randomHex(rng, 20), randomHex(rng, 20)}
	// The indexer and the rollup alike (issue 11): record.CheckTime.
	timeReasons := []string{reasonTime}
	cases := []*poisonCase{
		// Times first: a rollup partition that has seen no profile yet has
		// no watermark to call 1970 too late.
		{name: "time-1970", want: mustDLQ, reasons: timeReasons,
			build: goodRecords(time.Date(1970, 1, 1, 12, 0, 0, 0, time.UTC))},
		{name: "time-2262", want: mustDLQ, reasons: timeReasons,
			build: goodRecords(time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC))},
		{name: "time-plus-1d", want: mustDLQ, reasons: timeReasons,
			build: goodRecords(now.Add(24 * time.Hour))},
		{name: "schema-version-99", want: mustDLQ, reasons: []string{reasonSchema},
			build: withHeaders(goodRecords(now), func(host string) []kgo.RecordHeader {
				h := meta(host).Headers()
				h[0].Value = []byte("99")
				return h
			})},
		{name: "missing-headers", want: mustDLQ, reasons: []string{reasonHeader},
			build: withHeaders(goodRecords(now), func(string) []kgo.RecordHeader { return nil })},
		{name: "not-gzip", want: mustDLQ, reasons: []string{reasonNotGzip},
			build: value([]byte("this record value is plain text, not gzip"))},
		{name: "gzip-not-pprof", want: mustDLQ, reasons: []string{reasonNotPprof},
			build: value(pproftest.Gzip(notPprof(t, []byte("plain text in gzip: no pprof profile here")))),
		},
		{name: "odd-label-keys", want: either, reasons: []string{reasonTooLarge, reasonInvalid, "label"},
			build: oddLabelKeys(now)},
		// One 2 MB label value is over the decoder's 64 KiB string limit;
		// the same 2 MB as 32 values under it reaches the indexer, ~12 MB
		// of JSON if it does not cap label values (the bulk body and
		// Lucene's term limits).
		{name: "label-value-2MB", want: mustDLQ, reasons: []string{reasonTooLarge},
			build: escapableLabels(now, 1, 2<<20)},
		{name: "label-values-32x64KB", want: either, reasons: []string{reasonTooLarge, reasonInvalid, "label"},
			build: escapableLabels(now, 32, 64<<10-1)},
		{name: "long-host", want: either, reasons: []string{reasonTooLarge, reasonInvalid, "host"},
			hostFor: func(p path) string {
				return "poison-long-host-" + string(p) + "-" + strings.Repeat("h", 300-len("poison-long-host-raw-"))
			},
			build: goodRecords(now)},
		{name: "split-interval", want: mustCount, build: splitInterval(now)},
		{name: "build-ids-3000", rawOnly: true, want: mustCount, drain: 120 * time.Second,
			build: randomBuildIDs(now, rng, 3000)},
		// The symbolizer's other topic: a forged, poorer, mismatched, marked
		// or deleted value must not replace a binary's symbols; junk, a
		// flood of 64 MiB and decompression bombs must not bloat it. The
		// profile after them names the genuine binary, the mismatched one
		// and a bomb.
		{name: "debuginfo-hostile", rawOnly: true, want: mustCount,
			debuginfo: hostileDebuginfo(rng, genuineID, mismatchID, bombIDs),
			build:     debuginfoProfile(now, genuineID, mismatchID, bombIDs[0]),
			frames:    []string{"poison_genuine"}, noFrames: []string{"poison_forged"}},
		{name: "large-profile", want: mustCount, drain: 150 * time.Second, build: largeProfile(t, now)},
		{name: "junk-1.5MB", want: mustDLQ, reasons: []string{reasonNotGzip},
			build: value(junk(rng, 1_500_000))},
		{name: "gzip-random-1.5MB", want: mustDLQ, reasons: []string{reasonNotPprof, reasonTooLarge, reasonInvalid},
			build: value(pproftest.Gzip(notPprof(t, junk(rng, 1_500_000))))},
		{name: "gzip-bomb", want: mustDLQ, reasons: []string{reasonTooLarge},
			build: value(gzipBomb(t, now, 24<<20))},
		// Last: on a consumer without the fix it is fatal, and it would hide
		// every case after it.
		{name: "missing-location-101B", want: mustDLQ, reasons: []string{reasonInvalid},
			build: value(missingLocation(t, now))},
	}
	for _, c := range cases {
		c.init()
	}
	return cases
}

// outcome is what the DLQ says of one path of one case.
type outcome struct {
	by map[string][]*kgo.Record // service -> its DLQ records of this path
}

func (o outcome) dead(svc string) bool { return len(o.by[svc]) > 0 }

type casePath struct {
	c    *poisonCase
	path path
}

// attribute maps DLQ records to the case and path whose host is their key
// (a key cut to a cap still starts the host it was).
func attribute(t *testing.T, cases []*poisonCase, dlq []*kgo.Record) map[casePath]outcome {
	out := map[casePath]outcome{}
	for _, r := range dlq {
		cp, ok := caseOf(cases, string(r.Key))
		if !ok {
			continue
		}
		o := out[cp]
		if o.by == nil {
			o.by = map[string][]*kgo.Record{}
		}
		svc := record.HeaderValue(r.Headers, record.HeaderDLQService)
		o.by[svc] = append(o.by[svc], r)
		out[cp] = o
	}
	return out
}

func caseOf(cases []*poisonCase, key string) (casePath, bool) {
	for _, c := range cases {
		for _, p := range c.paths() {
			h := c.host(p)
			if key == h || (len(key) >= 64 && strings.HasPrefix(h, key)) {
				return casePath{c, p}, true
			}
		}
	}
	return casePath{}, false
}

const (
	svcSymbolizer = "stackstream-symbolizer"
	svcIndexer    = "stackstream-indexer"
	svcRollup     = "stackstream-rollup"
)

// checkDLQ checks each case's dead letters against what it wants, and that
// every dead letter is whole or cut with the header saying so, with the
// original coordinates and a reason of its case.
func checkDLQ(t *testing.T, rawTopic string, cases []*poisonCase, outcomes map[casePath]outcome, produced []*producedRecord, dlq []*kgo.Record) {
	byCoord := map[string]*producedRecord{}
	for _, p := range produced {
		byCoord[fmt.Sprintf("%s/%d/%d", p.rec.Topic, p.rec.Partition, p.rec.Offset)] = p
	}
	for _, r := range dlq {
		reason := record.HeaderValue(r.Headers, record.HeaderDLQReason)
		svc := record.HeaderValue(r.Headers, record.HeaderDLQService)
		coord := fmt.Sprintf("%s/%s/%s", record.HeaderValue(r.Headers, record.HeaderDLQTopic),
			record.HeaderValue(r.Headers, record.HeaderDLQPartition), record.HeaderValue(r.Headers, record.HeaderDLQOffset))
		trunc := record.HeaderValue(r.Headers, "stackstream-dlq-truncated")
		cp, ok := caseOf(cases, string(r.Key))
		label := "?"
		if ok {
			label = cp.c.name + "/" + string(cp.path)
		}
		t.Logf("dlq %s by %s from %s: %d bytes, truncated=%q, reason %q", label, svc, coord, len(r.Value), trunc, cut(reason, 300))
		switch {
		case !ok:
			t.Errorf("dlq record with key %q (by %s, reason %q) belongs to no case", cut(string(r.Key), 80), svc, cut(reason, 300))
		case reason == "":
			t.Errorf("dlq %s by %s: no %s header", label, svc, record.HeaderDLQReason)
		case strings.Contains(strings.ToLower(reason), "panic"):
			t.Errorf("dlq %s by %s: reason is a panic: %q", label, svc, cut(reason, 500))
		case !containsAny(reason, cp.c.reasons):
			t.Errorf("dlq %s by %s: reason %q is none of the case's (%q): uncategorized", label, svc, cut(reason, 500), cp.c.reasons)
		}
		for _, h := range []string{record.HeaderDLQTopic, record.HeaderDLQPartition, record.HeaderDLQOffset, record.HeaderDLQService} {
			if record.HeaderValue(r.Headers, h) == "" {
				t.Errorf("dlq %s by %s: no %s header", label, svc, h)
			}
		}
		// Coordinates: a dead letter of a record this test produced (not of
		// the symbolizer's output) names where that record is.
		p := byCoord[coord]
		if ok && (record.HeaderValue(r.Headers, record.HeaderDLQTopic) == rawTopic || cp.path == pathSym) &&
			(p == nil || p.host != cp.c.host(cp.path)) {
			t.Errorf("dlq %s by %s: coordinates %s are not those of the record produced", label, svc, coord)
		}
		// The value is the original, or cut to fit and saying so.
		if p != nil && !bytes.Equal(r.Value, p.rec.Value) {
			if trunc == "" || !bytes.HasPrefix(p.rec.Value, r.Value) {
				t.Errorf("dlq %s by %s: value of %d bytes is not the original %d bytes, nor its start with a stackstream-dlq-truncated header (%q)",
					label, svc, len(r.Value), len(p.rec.Value), trunc)
			}
		}
	}
	for _, c := range cases {
		for _, p := range c.paths() {
			o := outcomes[casePath{c, p}]
			name := c.name + "/" + string(p)
			switch c.want {
			case mustDLQ:
				switch {
				case p == pathRaw && o.dead(svcSymbolizer):
				case o.dead(svcIndexer) && o.dead(svcRollup):
				default:
					t.Errorf("%s %s, but the DLQ has it from %v only", name, c.want, services(o))
				}
			case mustCount:
				if len(o.by) > 0 {
					t.Errorf("%s %s, but the DLQ has it from %v: %q", name, c.want, services(o), firstReason(o))
				}
			}
		}
	}
}

func services(o outcome) []string {
	var s []string
	for k := range o.by {
		s = append(s, k)
	}
	sort.Strings(s)
	if s == nil {
		return []string{"none"}
	}
	return s
}

func firstReason(o outcome) string {
	for _, rs := range o.by {
		return cut(record.HeaderValue(rs[0].Headers, record.HeaderDLQReason), 300)
	}
	return ""
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func rangeParams(from, to time.Time) string {
	return "&from=" + url.QueryEscape(from.UTC().Format(time.RFC3339)) + "&to=" + url.QueryEscape(to.UTC().Format(time.RFC3339))
}

// totalCheck is one expected total in the query API.
type totalCheck struct {
	name string
	url  string
	want int64
	// of reads the total out of a response.
	of func([]byte) (float64, error)
	// frames must be in the flame graph, noFrames not.
	frames, noFrames []string
	got              string
	done             bool
	why              string // set when it cannot be checked
}

// framesProblem says which of tc's frames a flame graph answer lacks or
// holds wrongly; "" when none.
func (tc *totalCheck) framesProblem(body []byte) string {
	if len(tc.frames) == 0 && len(tc.noFrames) == 0 {
		return ""
	}
	var fg struct {
		Root flameNode `json:"root"`
	}
	if err := json.Unmarshal(body, &fg); err != nil {
		return err.Error()
	}
	for _, f := range tc.frames {
		if fg.Root.find(f) == nil {
			return fmt.Sprintf("total right, but no frame %q", f)
		}
	}
	for _, f := range tc.noFrames {
		if fg.Root.find(f) != nil {
			return fmt.Sprintf("total right, but a frame %q", f)
		}
	}
	return ""
}

// checkTotals waits (one shared deadline) until every total the cases
// expect is in the query API: the flame graph's from the indexer's samples,
// the series' from the rollups.
func checkTotals(ctx context.Context, t *testing.T, base string, from, to time.Time, cases []*poisonCase, outcomes map[casePath]outcome, consumers []*consumer) {
	broken := map[string]string{}
	for _, c := range consumers {
		if c.broken != "" {
			broken[c.svc.base] = c.broken
		}
	}
	rng := rangeParams(from, to)
	var checks []*totalCheck
	for _, c := range cases {
		if c.want == mustDLQ {
			continue
		}
		for _, p := range c.paths() {
			o := outcomes[casePath{c, p}]
			if c.want == either && o.dead(svcSymbolizer) {
				continue
			}
			sel := "&query=" + url.QueryEscape(c.selector(p))
			for _, q := range []struct {
				svc, what, url string
				of             func([]byte) (float64, error)
			}{
				{svcIndexer, "flamegraph", base + "flamegraph?type=cpu&max_nodes=1000" + rng + sel, flameTotal},
				{svcIndexer, "pprof", base + "pprof?type=cpu" + rng + sel, pprofTotal},
				{svcRollup, "series", base + "series?type=cpu&group_by=host" + rng + sel, seriesTotal},
			} {
				if c.want == either && o.dead(q.svc) {
					continue
				}
				tc := &totalCheck{name: c.name + "/" + string(p) + "/" + q.what, url: q.url, want: c.cpu[p], of: q.of}
				if q.what == "flamegraph" {
					tc.frames, tc.noFrames = c.frames, c.noFrames
				}
				for _, svc := range []string{svcSymbolizer, q.svc} {
					if why := broken[svc]; why != "" && (svc != svcSymbolizer || p == pathRaw) {
						tc.why = svc + " " + why
					}
				}
				checks = append(checks, tc)
			}
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		left := 0
		for _, tc := range checks {
			if tc.done || tc.why != "" {
				continue
			}
			body, err := getBody(tc.url)
			if err != nil {
				tc.got = err.Error()
				left++
				continue
			}
			v, err := tc.of(body)
			if err != nil {
				tc.got = err.Error()
				left++
				continue
			}
			tc.got = strconv.FormatFloat(v, 'f', -1, 64)
			if math.Abs(v-float64(tc.want)) <= max(1, float64(tc.want)*1e-9) {
				if msg := tc.framesProblem(body); msg != "" {
					tc.got = msg
					left++
					continue
				}
				tc.done = true
				continue
			}
			left++
		}
		if left == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	for _, tc := range checks {
		t.Run("total/"+tc.name, func(t *testing.T) {
			switch {
			case tc.why != "":
				t.Errorf("cannot count: %s", tc.why)
			case !tc.done:
				t.Errorf("total = %s, want %d ns (%s)", tc.got, tc.want, tc.url)
			}
		})
	}
}

func getBody(u string) ([]byte, error) {
	resp, err := http.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, cut(string(body), 500))
	}
	return body, err
}

// pprofTotal sums the exported profile's samples.
func pprofTotal(b []byte) (float64, error) {
	p, err := profile.ParseData(b)
	if err != nil {
		return 0, err
	}
	return float64(cpuOf(p)), nil
}

func flameTotal(b []byte) (float64, error) {
	var fg struct {
		Total int64 `json:"total"`
	}
	err := json.Unmarshal(b, &fg)
	return float64(fg.Total), err
}

// seriesTotal turns cores per step back into CPU nanoseconds.
func seriesTotal(b []byte) (float64, error) {
	var s struct {
		Step   float64 `json:"step_seconds"`
		Series []struct {
			Points [][2]float64 `json:"points"`
		} `json:"series"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, err
	}
	var sum float64
	for _, ser := range s.Series {
		for _, p := range ser.Points {
			sum += p[1] * s.Step * 1e9
		}
	}
	return sum, nil
}

// checkIndices checks that no index of the prefix is dated outside
// [now - retention, now + 1 day] and that odd label keys did not become
// fields of the samples mapping.
func checkIndices(t *testing.T, osURL, prefix string) {
	var cat []struct {
		Index string `json:"index"`
	}
	if err := getJSON(osURL+"/_cat/indices/"+prefix+"*?format=json&h=index", &cat); err != nil {
		t.Fatal(err)
	}
	names := indices.Names{Prefix: prefix}
	now := time.Now().UTC()
	day := func(t time.Time) time.Time { return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC) }
	month := func(t time.Time) time.Time { return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC) }
	oldest, newest := now.AddDate(0, 0, -poisonRetentionDays), now.AddDate(0, 0, 1)
	var list []string
	for _, ix := range cat {
		list = append(list, ix.Index)
		at, ok := names.IndexTime(ix.Index)
		if !ok {
			continue
		}
		lo, hi := day(oldest), day(newest)
		if strings.HasPrefix(ix.Index, prefix+"rollups-") {
			lo, hi = month(oldest), month(newest)
		}
		if at.Before(lo) || at.After(hi) {
			t.Errorf("index %s is dated outside [%s, %s]", ix.Index, lo.Format(time.DateOnly), hi.Format(time.DateOnly))
		}
	}
	sort.Strings(list)
	t.Logf("indices: %v", list)

	var mappings map[string]struct {
		Mappings struct {
			Properties map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"properties"`
		} `json:"mappings"`
	}
	if err := getJSON(osURL+"/"+names.SamplesPattern()+"/_mapping", &mappings); err != nil {
		t.Fatal(err)
	}
	for ix, m := range mappings {
		var odd []string
		for k := range m.Mappings.Properties["labels"].Properties {
			if !slices.Contains(record.ContractLabels, k) {
				odd = append(odd, k)
			}
		}
		sort.Strings(odd)
		t.Logf("%s: %d top-level fields, %d labels.* fields", ix, len(m.Mappings.Properties), len(m.Mappings.Properties["labels"].Properties))
		if len(odd) > 0 {
			t.Errorf("%s maps %d labels.* fields outside the contract's, e.g. %q", ix, len(odd), odd[:min(len(odd), 10)])
		}
	}
}
