package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
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
	"sync"
	"sync/atomic"
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

	cases := poisonCases(t)
	var produced []*producedRecord
	for _, c := range cases {
		t.Run("case/"+c.name, func(t *testing.T) {
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
		})
	}
	// The last consumer standing decides nothing: a record after all the
	// poison that must be queryable.
	good := &poisonCase{name: "good", want: mustCount, build: goodRecords(time.Now())}
	good.init()
	t.Run("case/good", func(t *testing.T) {
		for _, path := range good.paths() {
			recs, cpu := good.build(t, good.host(path))
			for _, r := range recs {
				r.Topic = topics.ProfilesRaw
				if path == pathSym {
					r.Topic = topics.ProfilesSymbolized
				}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatalf("produce good record: %v", err)
				}
				produced = append(produced, &producedRecord{c: good, path: path, host: good.host(path), rec: r})
			}
			good.cpu[path] = cpu
		}
		drain(ctx, t, k, consumers, good)
	})
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

// poisonRetentionDays is the indexer's retention in this test: samples
// indices may be dated from today minus this to tomorrow.
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
	drain   time.Duration // how long the consumers may take; default 90s

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

func meta(host string) record.Meta {
	return record.Meta{Type: record.ProfileCPU, Host: host, AgentVersion: "poison-test"}
}

func encode(t *testing.T, p *profile.Profile) []byte {
	t.Helper()
	v, err := record.EncodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func cpuOf(p *profile.Profile) int64 {
	var n int64
	for _, s := range p.Sample {
		n += s.Value[len(s.Value)-1]
	}
	return n
}

const tick = 10_000_000 // ns of CPU per sample, 100 Hz

// goodRecords is one valid CPU profile at at.
func goodRecords(at time.Time) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		b := pproftest.NewCPU(at, 10*time.Second)
		l := map[string]string{record.LabelPID: "42", record.LabelComm: "poison", record.LabelService: "poison"}
		b.Sample(l, []int64{7, 7 * tick}, "poison.leaf", "poison.mid", "poison.main")
		b.Sample(l, []int64{3, 3 * tick}, "poison.other", "poison.main")
		p := b.Profile()
		return []*kgo.Record{{Key: []byte(host), Value: encode(t, p), Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

func withHeaders(build func(*testing.T, string) ([]*kgo.Record, int64), h func(host string) []kgo.RecordHeader) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		recs, cpu := build(t, host)
		for _, r := range recs {
			r.Headers = h(host)
		}
		return recs, cpu
	}
}

// value is a record with valid headers and the value v.
func value(v []byte) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		return []*kgo.Record{{Key: []byte(host), Value: v, Headers: meta(host).Headers()}}, 0
	}
}

func junk(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	b[0] = 'J' // never the gzip magic
	return b
}

// notPprof fails the test unless b is indeed no pprof profile.
func notPprof(t *testing.T, b []byte) []byte {
	if _, err := profile.ParseUncompressed(b); err == nil {
		t.Fatalf("fixture %.20q... parses as pprof", b)
	}
	return b
}

// pb writes protobuf by hand, for profiles the pprof package refuses to
// write.
type pb []byte

func (b pb) varint(v uint64) pb {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
func (b pb) uint(field int, v uint64) pb { return b.varint(uint64(field) << 3).varint(v) }
func (b pb) bytes(field int, v []byte) pb {
	return append(b.varint(uint64(field)<<3|2).varint(uint64(len(v))), v...)
}
func (b pb) packed(field int, vs ...uint64) pb {
	var p pb
	for _, v := range vs {
		p = p.varint(v)
	}
	return b.bytes(field, p)
}

// profileHeader is a CPU profile's sample types, string table, time and
// period, with one function and location (ID 1) when withLocation.
func profileHeader(at time.Time, withLocation bool) pb {
	strs := []string{"", "samples", "count", "cpu", "nanoseconds", "poison.bomb"}
	var p pb
	p = p.bytes(1, pb(nil).uint(1, 1).uint(2, 2))
	p = p.bytes(1, pb(nil).uint(1, 3).uint(2, 4))
	if withLocation {
		p = p.bytes(5, pb(nil).uint(1, 1).uint(2, 5).uint(3, 5))
		p = p.bytes(4, pb(nil).uint(1, 1).bytes(4, pb(nil).uint(1, 1)))
	}
	for _, s := range strs {
		p = p.bytes(6, []byte(s))
	}
	p = p.uint(9, uint64(at.UnixNano())).uint(10, uint64(10*time.Second))
	p = p.bytes(11, pb(nil).uint(1, 3).uint(2, 4)).uint(12, tick)
	return p
}

// missingLocation is issue 11's first case: a valid gzip pprof whose one
// sample names location 7, which the profile does not define.
func missingLocation(t *testing.T, at time.Time) []byte {
	p := profileHeader(at, false).bytes(2, pb(nil).packed(1, 7).packed(2, 1, tick))
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(p)
	zw.Close()
	return buf.Bytes()
}

// gzipBomb is a small record inflating to about size bytes of pprof: one
// valid sample, repeated.
func gzipBomb(t *testing.T, at time.Time, size int) []byte {
	sample := pb(nil).bytes(2, pb(nil).packed(1, 1).packed(2, 1, tick))
	chunk := bytes.Repeat(sample, 64<<10/len(sample))
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(profileHeader(at, true))
	for n := 0; n < size; n += len(chunk) {
		zw.Write(chunk)
	}
	zw.Close()
	return buf.Bytes()
}

// oddLabelKeys carries 2,000 distinct label keys no mapping should take as
// field names: dots (a vs a.b), dashes, spaces, digits first, unicode, and
// keys past the length cap.
func oddLabelKeys(at time.Time) func(*testing.T, string) ([]*kgo.Record, int64) {
	key := func(n int) string {
		switch {
		case n == 0:
			return "a"
		case n == 1:
			return "a.b"
		}
		switch n % 8 {
		case 0:
			return fmt.Sprintf("a.%d", n)
		case 1:
			return fmt.Sprintf("a.b.%d", n)
		case 2:
			return fmt.Sprintf("dash-%d", n)
		case 3:
			return fmt.Sprintf("%d", n)
		case 4:
			return fmt.Sprintf("ключ.%d", n)
		case 5:
			return fmt.Sprintf("with space %d", n)
		case 6:
			return fmt.Sprintf("🔥%d", n)
		default:
			return strings.Repeat("long", 20) + strconv.Itoa(n)
		}
	}
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		b := pproftest.NewCPU(at, 10*time.Second)
		seen := map[string]bool{}
		for i := range 250 {
			l := map[string]string{record.LabelPID: strconv.Itoa(1000 + i), record.LabelComm: "odd"}
			for j := range 8 {
				k := key(i*8 + j)
				seen[k] = true
				l[k] = "v"
			}
			b.Sample(l, []int64{1, tick}, "poison.odd", "poison.main")
		}
		if len(seen) != 2000 {
			t.Fatalf("odd label keys: %d distinct, want 2000", len(seen))
		}
		p := b.Profile()
		return []*kgo.Record{{Key: []byte(host), Value: encode(t, p), Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

// escapableLabels gives n processes each a label value of size bytes of
// characters JSON escapes (six bytes each for the control ones), distinct
// per process.
func escapableLabels(at time.Time, n, size int) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		const unit = "\x01\"\\<>&\u2028\x1f" // 10 bytes
		b := pproftest.NewCPU(at, 10*time.Second)
		for i := range n {
			v := fmt.Sprintf("%04d", i) + strings.Repeat(unit, (size-4)/len(unit))
			b.Sample(map[string]string{record.LabelPID: strconv.Itoa(2000 + i), record.LabelComm: "blob", "blob": v},
				[]int64{2, 2 * tick}, "poison.blob", "poison.main")
		}
		p := b.Profile()
		return []*kgo.Record{{Key: []byte(host), Value: encode(t, p), Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

// splitInterval is one host's interval in two records, as the agent splits
// one too large: same host, time and labels, parts "0" and "1".
func splitInterval(at time.Time) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		l := map[string]string{record.LabelPID: "4", record.LabelComm: "split"}
		p0 := pproftest.NewCPU(at, 10*time.Second).
			Sample(l, []int64{5, 5 * tick}, "split.a", "split.main").Profile()
		p1 := pproftest.NewCPU(at, 10*time.Second).
			Sample(l, []int64{3, 3 * tick}, "split.a", "split.main").
			Sample(l, []int64{2, 2 * tick}, "split.b", "split.main").Profile()
		var recs []*kgo.Record
		for i, p := range []*profile.Profile{p0, p1} {
			h := append(meta(host).Headers(), kgo.RecordHeader{Key: record.HeaderPart, Value: []byte(strconv.Itoa(i))})
			recs = append(recs, &kgo.Record{Key: []byte(host), Value: encode(t, p), Headers: h})
		}
		return recs, cpuOf(p0) + cpuOf(p1)
	}
}

// randomBuildIDs is a raw profile with n mappings, each with a build ID no
// source knows and one sample in it.
func randomBuildIDs(at time.Time, rng *rand.Rand, n int) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		b := pproftest.NewCPU(at, 10*time.Second)
		l := map[string]string{record.LabelPID: "5", record.LabelComm: "buildids"}
		for i := range n {
			id := make([]byte, 20)
			for j := range id {
				id[j] = byte(rng.Uint32())
			}
			start := uint64(0x7f0000000000) + uint64(i)<<20
			m := b.Mapping(start, start+1<<20, 0, fmt.Sprintf("/opt/poison/lib%04d.so", i), hex.EncodeToString(id))
			b.AddressSample(l, []int64{1, tick}, m, start+0x1234)
		}
		p := b.Profile()
		return []*kgo.Record{{Key: []byte(host), Value: encode(t, p), Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

// largeProfile is issue 11's case 12: google/pprof's own large.cpu (a real
// 1.2 MB Go CPU profile, 20,430 samples, each its own stack), re-timed to
// at. Its gzip value is over 1 MiB, so its symbolized form cannot fit one
// record of the symbolizer's default size, compressed or not.
func largeProfile(t *testing.T, at time.Time) func(*testing.T, string) ([]*kgo.Record, int64) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/google/pprof").Output()
	if err != nil {
		t.Fatalf("locate the github.com/google/pprof module for its testdata: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "internal", "proftest", "testdata", "large.cpu"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(raw)
	if err != nil {
		t.Fatalf("parse large.cpu: %v", err)
	}
	p.TimeNanos = at.UnixNano()
	v := encode(t, p)
	if len(v) <= 1<<20 {
		t.Fatalf("large profile fixture is %d bytes gzip, want over 1 MiB", len(v))
	}
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		return []*kgo.Record{{Key: []byte(host), Value: v, Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

func totalBytes(recs []*kgo.Record) int {
	n := 0
	for _, r := range recs {
		n += len(r.Value)
	}
	return n
}

type producedRecord struct {
	c    *poisonCase
	path path
	host string
	rec  *kgo.Record // with the partition and offset it got
}

// service is one running binary.
type service struct {
	base string
	cmd  *exec.Cmd
	log  string
	// peak is the highest VmHWM seen while it ran: a process that exits
	// takes its own with it.
	peak atomic.Int64
}

// watchRSS samples every service's VmHWM until ctx ends.
func watchRSS(ctx context.Context, svcs map[string]*service) {
	for {
		for _, s := range svcs {
			if v, ok := s.peakRSS(); ok && v > s.peak.Load() {
				s.peak.Store(v)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startLogged runs bin like start does, but into a log file: a panic's
// first lines (the panicking goroutine) are what name the cause, and a
// 4,000-byte tail of a goroutine dump does not show them.
func startLogged(t *testing.T, bin, logDir string, env []string) *service {
	t.Helper()
	s := &service{base: filepath.Base(bin), log: filepath.Join(logDir, filepath.Base(bin)+".log")}
	f, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin)
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Logf("%s pid %d", s.base, s.cmd.Process.Pid)
	t.Cleanup(func() {
		s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
		f.Close()
		if t.Failed() {
			t.Logf("---- %s (%s) ----\n%s", s.base, s.log, s.excerpt())
		}
	})
	return s
}

// excerpt is the start of a panic, or the log's tail.
func (s *service) excerpt() string {
	b, _ := os.ReadFile(s.log)
	out := string(b)
	if i := strings.Index(out, "panic: "); i >= 0 {
		out = out[i:]
		if len(out) > 3000 {
			out = out[:3000] + "..."
		}
		return out
	}
	return tail(out, 3000)
}

// state is "" while the process runs, else what became of it. The test
// never waits for it before cleanup, so an exited one is a zombie.
func (s *service) state() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return "gone"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			v = strings.TrimSpace(v)
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return "exited (" + v + ")"
			}
			return ""
		}
	}
	return "no State in /proc status"
}

// peakRSS is VmHWM in bytes.
func (s *service) peakRSS() (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// consumer is a service with the group and topic whose lag says whether it
// has handled everything.
type consumer struct {
	svc    *service
	group  string
	topic  string
	rollup bool
	// broken says in which case the consumer exited or stalled; later cases
	// do not wait for it (each would only time out again).
	broken string
}

type kafkaView struct {
	brokers []string
	adm     *kadm.Client
}

var rollupCheckpoint = regexp.MustCompile(`next=(-?\d+)`)

// lag is the number of records of c's topic that c has not handled: from
// its committed offset (for the rollup, the next= of its checkpoint when
// further) to the end readable with read_committed, not counting the
// transaction markers the symbolizer's commits leave (a consumer commits
// the offset after its last record; the marker after it is no record).
func (k *kafkaView) lag(ctx context.Context, c *consumer) (int64, error) {
	ends, err := k.adm.ListCommittedOffsets(ctx, c.topic)
	if err != nil {
		return -1, fmt.Errorf("list end offsets of %s: %w", c.topic, err)
	}
	offs, err := k.adm.FetchOffsetsForTopics(ctx, c.group, c.topic)
	if err != nil {
		return -1, fmt.Errorf("fetch offsets of group %s: %w", c.group, err)
	}
	gaps := map[int32][2]int64{}
	var ferr error
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Err != nil {
			ferr = lo.Err
			return
		}
		start := int64(0)
		if o, ok := offs.Lookup(c.topic, lo.Partition); ok && o.Err == nil && o.At >= 0 {
			start = o.At
			if m := rollupCheckpoint.FindStringSubmatch(o.Metadata); c.rollup && m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				start = max(start, n)
			}
		}
		if start < lo.Offset {
			gaps[lo.Partition] = [2]int64{start, lo.Offset}
		}
	})
	if ferr != nil {
		return -1, ferr
	}
	if len(gaps) == 0 {
		return 0, nil
	}
	return k.countRecords(ctx, c.topic, gaps)
}

// countRecords counts the data records in [start, end) of each partition.
func (k *kafkaView) countRecords(ctx context.Context, topic string, gaps map[int32][2]int64) (int64, error) {
	at := map[int32]kgo.Offset{}
	for p, g := range gaps {
		at[p] = kgo.NewOffset().At(g[0])
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.FetchMaxPartitionBytes(1<<20))
	if err != nil {
		return -1, err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n int64
	left := len(gaps)
	done := map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			// Not read to the end: count the rest as lag.
			var rest int64
			for p, g := range gaps {
				if !done[p] {
					rest += g[1] - g[0]
				}
			}
			return n + rest, nil
		}
		fs.EachRecord(func(r *kgo.Record) {
			g := gaps[r.Partition]
			if done[r.Partition] || r.Offset >= g[1] {
				return
			}
			if !r.Attrs.IsControl() {
				n++
			}
			if r.Offset >= g[1]-1 {
				done[r.Partition] = true
				left--
			}
		})
	}
	return n, nil
}

// drain waits until every consumer has handled everything produced so far,
// in pipeline order (the symbolizer's output is committed with its offsets,
// so once its lag is zero, its output counts in the others' lag), and logs
// how long each took. A consumer that exits or does not finish in time is
// broken from then on.
func drain(ctx context.Context, t *testing.T, k *kafkaView, consumers []*consumer, c *poisonCase) {
	t.Helper()
	for _, cn := range consumers {
		if cn.broken != "" {
			t.Errorf("not checked by %s, broken earlier: %s", cn.svc.base, cn.broken)
		}
	}
	start := time.Now()
	deadline, lastLog := start.Add(c.drain), start
	took := map[*consumer]time.Duration{}
	for {
		pending := ""
		upstream := true // the symbolizer (first) is done or broken
		for i, cn := range consumers {
			if cn.broken != "" {
				continue
			}
			if st := cn.svc.state(); st != "" {
				cn.broken = fmt.Sprintf("%s in case %s", st, c.name)
				t.Errorf("%s %s:\n%s", cn.svc.base, cn.broken, cn.svc.excerpt())
				continue
			}
			if _, ok := took[cn]; ok {
				continue
			}
			lag, err := k.lag(ctx, cn)
			switch {
			case err != nil || lag != 0:
				if pending == "" {
					pending = fmt.Sprintf("%s: lag %d on %s (%v)", cn.svc.base, lag, cn.topic, err)
				}
			case upstream:
				took[cn] = time.Since(start)
			}
			if i == 0 {
				_, upstream = took[cn]
			}
		}
		if pending == "" && len(took) == len(consumers)-brokenCount(consumers) {
			var parts []string
			for _, cn := range consumers {
				if d, ok := took[cn]; ok {
					parts = append(parts, fmt.Sprintf("%s %.1fs", strings.TrimPrefix(cn.svc.base, "stackstream-"), d.Seconds()))
				}
			}
			t.Logf("handled by %s", strings.Join(parts, ", "))
			return
		}
		if time.Since(lastLog) >= 10*time.Second {
			t.Logf("after %.0fs waiting for %s", time.Since(start).Seconds(), pending)
			lastLog = time.Now()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, cn := range consumers {
				if cn.broken == "" && strings.HasPrefix(pending, cn.svc.base+":") {
					cn.broken = fmt.Sprintf("stalled in case %s (%s after %s)", c.name, pending, c.drain)
					t.Errorf("%s %s; log tail:\n%s", cn.svc.base, cn.broken, tail(readFile(cn.svc.log), 2000))
				}
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func brokenCount(consumers []*consumer) int {
	n := 0
	for _, cn := range consumers {
		if cn.broken != "" {
			n++
		}
	}
	return n
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// readAll reads topic from the start to its read-committed end.
func readAll(ctx context.Context, t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	adm := kadm.NewClient(mustClient(t, brokers))
	defer adm.Close()
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Offset > 0 {
			want[lo.Partition] = lo.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl := mustClient(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxBytes(64<<20))
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("read %s: not at the end after 30s (left: %v)", topic, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

func mustClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
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
	of   func([]byte) (float64, error)
	got  string
	done bool
	why  string // set when it cannot be checked
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
				{svcIndexer, "flamegraph", base + "flamegraph?type=cpu&max_nodes=10" + rng + sel, flameTotal},
				{svcIndexer, "pprof", base + "pprof?type=cpu" + rng + sel, pprofTotal},
				{svcRollup, "series", base + "series?type=cpu&group_by=host" + rng + sel, seriesTotal},
			} {
				if c.want == either && o.dead(q.svc) {
					continue
				}
				tc := &totalCheck{name: c.name + "/" + string(p) + "/" + q.what, url: q.url, want: c.cpu[p], of: q.of}
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

// slowDebuginfod answers every lookup 404 after a delay, as a remote
// debuginfod server that does not know a build ID does, and counts the
// lookups and how many were in flight at once.
type slowDebuginfod struct {
	url         string
	n, cur, max atomic.Int64
}

func newSlowDebuginfod(t *testing.T, delay time.Duration) *slowDebuginfod {
	d := &slowDebuginfod{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.n.Add(1)
		c := d.cur.Add(1)
		mu.Lock()
		if c > d.max.Load() {
			d.max.Store(c)
		}
		mu.Unlock()
		defer d.cur.Add(-1)
		time.Sleep(delay)
		http.NotFound(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	d.url = "http://" + ln.Addr().String()
	return d
}

func (d *slowDebuginfod) stats() (n, peak int64) { return d.n.Load(), d.max.Load() }

// buildPoisonBinaries builds the services this suite runs (not the agent:
// it needs none, and another helper's half-done agent change must not fail it).
func buildPoisonBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// One go build: the five link in parallel.
	args := []string{"build", "-o", dir + string(filepath.Separator),
		"../services/symbolizer/cmd/stackstream-symbolizer",
		"../services/indexer/cmd/stackstream-indexer",
		"../services/rollup/cmd/stackstream-rollup",
		"../services/query/cmd/stackstream-query",
		"../services/ctl/cmd/stackctl",
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir
}
