// Command fleetbytes measures the bytes on disk per raw sample of every index
// a raw sample needs (samples, stacks, rollups) under stackctl loadgen's
// fleet (issue 15): loadgen publishes a fleet over a simulated time long
// enough for the stacks to saturate, the symbolizer, indexer and rollup of
// bin/ index it under throw-away topic, index and group names, and once
// everything is stored each index is force-merged and its store size divided
// by the raw samples loadgen published.
//
// With -topics it skips loadgen and the symbolizer and reads the
// profiles.symbolized topic of an earlier run kept with -keep: the same
// records through the indexer and rollup of -bin into fresh indices, which
// compares two mappings (or two indexers) on exactly the same input.
//
// Run from services/indexer: go run ./bench/fleetbytes -h.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type options struct {
	bin, brokers, osURL string
	hosts               int
	duration            time.Duration
	speed               float64
	seed                int64
	topics              string // reuse the topics of a kept run (their prefix)
	rawSamples          int64  // with -topics: the raw samples that run published
	keep                bool
	portBase            int
	rollupStateBytes    int64
	progress            time.Duration
	rollup              bool
	indexer             bool
	daypass             string // the compactor pass's binary; "" skips it
	osTimeout           time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "../../bin", "directory of stackctl and the consumers' binaries")
	flag.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "Kafka")
	flag.StringVar(&o.osURL, "opensearch", "http://127.0.0.1:9200", "OpenSearch")
	flag.IntVar(&o.hosts, "hosts", 40, "loadgen: simulated 8-core hosts")
	flag.DurationVar(&o.duration, "duration", 3*time.Hour, "loadgen: simulated time, ending now")
	flag.Float64Var(&o.speed, "speed", 8, "loadgen: simulated seconds per second")
	flag.Int64Var(&o.seed, "seed", 1, "loadgen: seed")
	flag.StringVar(&o.topics, "topics", "", "topic prefix of a run kept with -keep (its run ID and a dot): index its profiles.symbolized again, without loadgen and symbolizer")
	flag.Int64Var(&o.rawSamples, "raw-samples", 0, "with -topics: the raw samples that run published (its summary prints them)")
	flag.BoolVar(&o.keep, "keep", false, "keep the topics, indices, templates and groups")
	flag.IntVar(&o.portBase, "port-base", 18982, "listen ports of the symbolizer, indexer and rollup: this one and up")
	flag.Int64Var(&o.rollupStateBytes, "rollup-state-bytes", 1<<30, "STACKSTREAM_ROLLUP_MAX_STATE_BYTES (the default 256 MiB refuses catch-up hours of large fleets)")
	flag.DurationVar(&o.progress, "progress", 30*time.Second, "progress line interval")
	flag.DurationVar(&o.osTimeout, "opensearch-timeout", 10*time.Minute, "STACKSTREAM_OPENSEARCH_TIMEOUT of the consumers: on a node shared with other work a bulk request can take minutes, and one timed out is sent again whole")
	flag.BoolVar(&o.rollup, "rollup", true, "run the rollup; false measures the samples and stacks only (the rollups of a kept run: bench/rollupkinds.sh)")
	flag.BoolVar(&o.indexer, "indexer", true, "run the indexer; false with -topics measures the rollups only (another rollup on the same records)")
	flag.StringVar(&o.daypass, "daypass", "", "binary of services/rollup/bench/daypass (default: daypass in -bin): once the rollup stopped, one pass of its compactor as of 01:00 the day after the run's last day writes the day trees, day function tables and the fleet's day and hour heads the live rollup writes once that day settled; \"none\" skips it")
	flag.Parse()
	if o.daypass == "" {
		o.daypass = filepath.Join(o.bin, "daypass")
	}
	if o.daypass == "none" || !o.rollup {
		o.daypass = ""
	} else if _, err := os.Stat(o.daypass); err != nil {
		fmt.Fprintf(os.Stderr, "fleetbytes: %v: build it (cd services/rollup && go build -o %s ./bench/daypass) or pass -daypass none\n", err, o.daypass)
		os.Exit(2)
	}
	if o.topics != "" && o.rawSamples <= 0 {
		fmt.Fprintln(os.Stderr, "fleetbytes: -topics needs -raw-samples (the raw samples of the run that published them)")
		os.Exit(2)
	}
	if !o.indexer && o.topics == "" {
		fmt.Fprintln(os.Stderr, "fleetbytes: -indexer=false needs -topics (a fresh run must index what it measures)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbytes:", err)
		os.Exit(1)
	}
}

// consumers in the order of their listen ports.
var consumers = []string{"stackstream-symbolizer", "stackstream-indexer", "stackstream-rollup"}

type bench struct {
	o       options
	id      string // names every topic, index, template and group of the run
	env     []string
	adm     *kadm.Client
	procs   map[string]*exec.Cmd
	exited  map[string]chan error
	logDir  string
	started []string
}

func run(ctx context.Context, o options) error {
	b := &bench{o: o, id: fmt.Sprintf("ixb15-%d", time.Now().Unix()), procs: map[string]*exec.Cmd{}, exited: map[string]chan error{}}
	topicPrefix := b.id + "."
	if o.topics != "" {
		topicPrefix = o.topics
	}
	b.logDir = filepath.Join(os.TempDir(), b.id)
	if err := os.MkdirAll(b.logDir, 0o755); err != nil {
		return err
	}
	b.env = append(os.Environ(),
		"STACKSTREAM_KAFKA_BROKERS="+o.brokers,
		"STACKSTREAM_KAFKA_TOPIC_PREFIX="+topicPrefix,
		"STACKSTREAM_OPENSEARCH_URL="+o.osURL,
		"STACKSTREAM_OPENSEARCH_INDEX_PREFIX="+b.id+"-",
		"STACKSTREAM_OPENSEARCH_TIMEOUT="+o.osTimeout.String(),
		"STACKSTREAM_SYMBOLIZER_GROUP="+b.id+"-symbolizer",
		"STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID="+b.id+"-symbolizer",
		"STACKSTREAM_INDEXER_GROUP="+b.id+"-indexer",
		"STACKSTREAM_ROLLUP_GROUP="+b.id+"-rollup",
		fmt.Sprintf("STACKSTREAM_ROLLUP_MAX_STATE_BYTES=%d", o.rollupStateBytes),
	)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(o.brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	b.adm = kadm.NewClient(cl)
	defer b.cleanup()

	fmt.Printf("# fleetbytes %s: topics %s*, indices %s-*, bin %s, logs %s\n", b.id, topicPrefix, b.id, o.bin, b.logDir)
	if out, err := b.command("stackctl", "init"); err != nil {
		return fmt.Errorf("stackctl init: %v: %s", err, out)
	}
	var names []string
	for _, name := range consumers {
		if name == "stackstream-symbolizer" && o.topics != "" || name == "stackstream-rollup" && !o.rollup || name == "stackstream-indexer" && !o.indexer {
			continue
		}
		names = append(names, name)
	}
	for _, name := range names {
		if err := b.start(name); err != nil {
			return err
		}
	}
	if err := b.waitReady(ctx, names); err != nil {
		return err
	}
	t0 := time.Now()
	raw := o.rawSamples
	progress, stopProgress := context.WithCancel(ctx)
	go b.report(progress, t0, o.progress)
	if o.topics == "" {
		if raw, err = b.loadgen(ctx); err != nil {
			stopProgress()
			return err
		}
	}
	err = b.waitDrained(ctx, names)
	stopProgress()
	if err != nil {
		return err
	}
	// The rollup writes the windows still open (the last minutes, the
	// current hour) when it stops; the others have nothing left.
	for _, name := range []string{"stackstream-rollup", "stackstream-indexer", "stackstream-symbolizer"} {
		if err := b.stop(name); err != nil {
			return err
		}
	}
	if o.daypass != "" {
		if err := b.compact(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("stored after %v; force-merging every index of the run\n", time.Since(t0).Round(time.Second))
	sizes, err := b.mergedSizes(ctx)
	if err != nil {
		return err
	}
	return b.summary(ctx, sizes, raw)
}

// loadgen publishes the fleet, its progress lines on stdout, and returns
// the raw samples its summary counts.
func (b *bench) loadgen(ctx context.Context) (int64, error) {
	o := b.o
	cmd := exec.CommandContext(ctx, filepath.Join(o.bin, "stackctl"), "loadgen",
		"-hosts", strconv.Itoa(o.hosts), "-duration", o.duration.String(),
		"-speed", strconv.FormatFloat(o.speed, 'g', -1, 64), "-seed", strconv.FormatInt(o.seed, 10),
		"-host-prefix", b.id+"-")
	cmd.Env = b.env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start loadgen: %w (run make build)", err)
	}
	var done string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		fmt.Println("  " + sc.Text())
		if strings.HasPrefix(sc.Text(), "loadgen: done") {
			done = sc.Text()
		}
	}
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("loadgen: %w", err)
	}
	m := regexp.MustCompile(`(\d+) raw samples`).FindStringSubmatch(done)
	if m == nil {
		return 0, fmt.Errorf("loadgen printed no summary with raw samples: %q", done)
	}
	return strconv.ParseInt(m[1], 10, 64)
}

func (b *bench) command(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(b.o.bin, name), args...)
	cmd.Env = b.env
	return cmd.CombinedOutput()
}

func (b *bench) addr(name string) string {
	for i, c := range consumers {
		if c == name {
			return fmt.Sprintf("127.0.0.1:%d", b.o.portBase+i)
		}
	}
	panic("unknown consumer " + name)
}

func (b *bench) start(name string) error {
	log, err := os.Create(filepath.Join(b.logDir, name+".log"))
	if err != nil {
		return err
	}
	// A port held by another process would answer /metrics for this one.
	if l, err := net.Listen("tcp", b.addr(name)); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %s is taken (-port-base moves the ports): %w", name, b.addr(name), err)
	} else {
		l.Close()
	}
	cmd := exec.Command(filepath.Join(b.o.bin, name))
	cmd.Env = append(b.env, "STACKSTREAM_LISTEN_ADDR="+b.addr(name))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w (run make build)", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); log.Close() }()
	b.procs[name], b.exited[name] = cmd, exited
	b.started = append(b.started, name)
	return nil
}

// stop sends SIGTERM and waits for a clean exit.
func (b *bench) stop(name string) error {
	cmd, ok := b.procs[name]
	if !ok {
		return nil
	}
	delete(b.procs, name)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	select {
	case err := <-b.exited[name]:
		if err != nil {
			return fmt.Errorf("%s exited with %v; its log: %s", name, err, filepath.Join(b.logDir, name+".log"))
		}
		return nil
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		return fmt.Errorf("%s did not stop within 2 min of SIGTERM", name)
	}
}

// alive fails when a consumer exited by itself: every figure after it
// would be wrong.
func (b *bench) alive() error {
	for name := range b.procs {
		select {
		case err := <-b.exited[name]:
			delete(b.procs, name)
			return fmt.Errorf("%s exited by itself (%v); its log: %s", name, err, filepath.Join(b.logDir, name+".log"))
		default:
		}
	}
	return nil
}

func (b *bench) waitReady(ctx context.Context, names []string) error {
	deadline := time.Now().Add(time.Minute)
	for _, name := range names {
		for {
			if err := b.alive(); err != nil {
				return err
			}
			resp, err := http.Get("http://" + b.addr(name) + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready after 1 min", name)
			}
			if !sleep(ctx, time.Second) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// lags are the committed lags of the symbolizer's and indexer's groups and
// the rollup's own lag metric (its commits trail by design, docs/ROLLUP.md).
func (b *bench) lags(ctx context.Context, names []string) (map[string]int64, error) {
	out := map[string]int64{}
	var groups []string
	for _, name := range names {
		if name != "stackstream-rollup" {
			groups = append(groups, b.id+strings.TrimPrefix(name, "stackstream"))
		}
	}
	// Lag of no group is every group's: the rollup alone has none to ask.
	if len(groups) > 0 {
		ls, err := b.adm.Lag(ctx, groups...)
		if err != nil {
			return nil, err
		}
		for _, l := range ls.Sorted() {
			if l.Error() != nil {
				return nil, l.Error()
			}
			name := "stackstream" + strings.TrimPrefix(l.Group, b.id)
			out[name] = l.Lag.Total()
		}
	}
	if !slices.Contains(names, "stackstream-rollup") {
		return out, nil
	}
	n := metric("http://"+b.addr("stackstream-rollup")+"/metrics", "stackstream_rollup_lag_records")
	if n < 0 {
		return nil, errors.New("rollup metrics unreadable")
	}
	out["stackstream-rollup"] = n
	return out, nil
}

// waitDrained waits until every consumer read everything: a lag that
// stays the same small value for 20 s also counts (a read-committed reader
// stops short of the transaction markers at a partition's end).
func (b *bench) waitDrained(ctx context.Context, names []string) error {
	var last map[string]int64
	still := 0
	for {
		if err := b.alive(); err != nil {
			return err
		}
		l, err := b.lags(ctx, names)
		if err == nil && fmt.Sprint(l) == fmt.Sprint(last) {
			still++
		} else {
			still = 0
		}
		last = l
		var total int64
		for _, v := range l {
			total += v
		}
		if err == nil && (total == 0 || total <= 64 && still >= 10) {
			return nil
		}
		if !sleep(ctx, 2*time.Second) {
			return ctx.Err()
		}
	}
}

// report prints a progress line every interval: lags, documents and
// (not merged) bytes of each index kind.
func (b *bench) report(ctx context.Context, t0 time.Time, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l, err := b.lags(ctx, b.started)
		idx, ierr := b.indices(ctx)
		if err != nil || ierr != nil {
			fmt.Printf("  progress %v: %v %v\n", time.Since(t0).Round(time.Second), err, ierr)
			continue
		}
		var parts []string
		for _, k := range kinds {
			var docs, bytes int64
			for _, i := range idx {
				if kindOf(b.id, i.Index) == k {
					docs += i.Docs
					bytes += i.Bytes
				}
			}
			parts = append(parts, fmt.Sprintf("%s %d docs %.1f MB", k, docs, float64(bytes)/1e6))
		}
		fmt.Printf("  progress %v: lag %v; %s (not merged)\n", time.Since(t0).Round(time.Second), l, strings.Join(parts, ", "))
	}
}

var kinds = []string{"samples", "stacks", "rollups"}

// kindOf is the index kind of a physical index of the run: <id>-<kind>[-period].
func kindOf(id, index string) string {
	rest := strings.TrimPrefix(index, id+"-")
	for _, k := range kinds {
		if rest == k || strings.HasPrefix(rest, k+"-") || strings.HasPrefix(rest, k+"_") {
			return k
		}
	}
	return ""
}

type indexInfo struct {
	Index string
	UUID  string
	Docs  int64
	Bytes int64
}

func (b *bench) indices(ctx context.Context) ([]indexInfo, error) {
	var rows []struct {
		Index string `json:"index"`
		UUID  string `json:"uuid"`
		Docs  string `json:"docs.count"`
		Size  string `json:"pri.store.size"`
	}
	if err := b.getJSON(ctx, "/_cat/indices/"+b.id+"-*?format=json&bytes=b&h=index,uuid,docs.count,pri.store.size", &rows); err != nil {
		return nil, err
	}
	out := make([]indexInfo, 0, len(rows))
	for _, r := range rows {
		docs, _ := strconv.ParseInt(r.Docs, 10, 64)
		size, _ := strconv.ParseInt(r.Size, 10, 64)
		out = append(out, indexInfo{r.Index, r.UUID, docs, size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

func (b *bench) cleanup() {
	for _, name := range b.started {
		if cmd, ok := b.procs[name]; ok {
			cmd.Process.Kill()
			<-b.exited[name]
		}
	}
	if b.o.keep {
		fmt.Printf("kept: indices and templates %s-*, groups %s-*\n", b.id, b.id)
		if b.o.topics == "" {
			fmt.Printf("kept: topics %s*\n", b.id+".")
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if b.o.topics == "" {
		if topics, err := b.adm.ListTopics(ctx); err == nil {
			var own []string
			for _, t := range topics.Names() {
				if strings.HasPrefix(t, b.id+".") {
					own = append(own, t)
				}
			}
			b.adm.DeleteTopics(ctx, own...)
		}
	}
	b.adm.DeleteGroups(ctx, b.id+"-symbolizer", b.id+"-indexer", b.id+"-rollup")
	for _, path := range []string{"/" + b.id + "-*", "/_index_template/" + b.id + "-*"} {
		b.do(ctx, http.MethodDelete, path, nil)
	}
}

func metric(url, name string) int64 {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return int64(sum)
}

func (b *bench) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.o.osURL+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func (b *bench) getJSON(ctx context.Context, path string, v any) error {
	return b.callJSON(ctx, http.MethodGet, path, nil, v)
}

func (b *bench) postJSON(ctx context.Context, path, query string, v any) error {
	return b.callJSON(ctx, http.MethodPost, path, []byte(query), v)
}

func (b *bench) callJSON(ctx context.Context, method, path string, query []byte, v any) error {
	st, body, err := b.do(ctx, method, path, query)
	if err != nil {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, st, body)
	}
	return json.Unmarshal(body, v)
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
