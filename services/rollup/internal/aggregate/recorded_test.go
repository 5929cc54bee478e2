package aggregate

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// recordedReader reads a partition's records dumped by kcat -f '%h\n%R%s'.
type recordedReader struct {
	r   *bufio.Reader
	off int64
}

func (rr *recordedReader) next() (*kgo.Record, error) {
	line, err := rr.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	var hs []kgo.RecordHeader
	for _, kv := range strings.Split(strings.TrimSuffix(line, "\n"), ",") {
		k, v, _ := strings.Cut(kv, "=")
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	var n [4]byte
	if _, err := io.ReadFull(rr.r, n[:]); err != nil {
		return nil, err
	}
	v := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(rr.r, v); err != nil {
		return nil, err
	}
	rec := &kgo.Record{Headers: hs, Value: v, Offset: rr.off}
	rr.off++
	return rec, nil
}

// TestRecordedStateBytes folds records of the symbolized topic recorded
// from a run (ROLLUP_RECORDS: a directory of part<N>.bin, one per
// partition, each record as kcat -f '%h\n%R%s' writes it; docs/ROLLUP.md,
// "Recorded fleet state") through one Budget as an instance does, the
// partitions' records interleaved, documents stored, windows evicted and
// the offset committed every 400 records, and logs the charge by
// resolution and part as it goes; at the end it checks that the charge is
// above the heap held, as TestFleetStateBytes does for its generated
// fleet. ROLLUP_RECORDS_HEAP writes the heap profile at the end. The
// recordings are hundreds of MB, so they are not checked in: without
// ROLLUP_RECORDS the test has nothing to fold.
func TestRecordedStateBytes(t *testing.T) {
	dir := os.Getenv("ROLLUP_RECORDS")
	if dir == "" {
		t.Skip("ROLLUP_RECORDS not set: no recorded partitions to fold")
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	files, _ := filepath.Glob(filepath.Join(dir, "part*.bin"))
	sort.Strings(files)
	budget := &Budget{MaxBytes: math.MaxInt64}
	var readers []*recordedReader
	var parts []*Partition
	var last time.Time
	for i, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		readers = append(readers, &recordedReader{r: bufio.NewReaderSize(fh, 1<<20)})
		cfg := Config{AllowedLateness: 2 * time.Minute, Retention: 10 * time.Minute, MaxClockSkew: 24 * time.Hour,
			Names: indices.Names{Prefix: "t-"}, Now: func() time.Time { return last.Add(time.Minute) }, Partition: int32(i), Budget: budget,
			HeadMinNodes: math.MaxInt} // the service's defaults: minute trees, no window heads
		parts = append(parts, NewPartition(cfg, Checkpoint{}))
	}
	dec := NewDecoder(record.DefaultLimits())
	done := make([]bool, len(readers))
	n, left := 0, len(readers)
	report := func() {
		byRes := map[string]int64{}
		var valueSet, values, trieBytes, trieNodes, tableStacks, hourDocs, minuteDocs int64
		for _, p := range parts {
			for _, w := range p.windows {
				byRes[w.key.res] += w.bytes
				for _, v := range w.values {
					values += int64(len(v.m)) * nodeValueBytes
					valueSet += int64(len(v.m))
				}
				if w.key.res == indices.ResolutionHour && w.table != nil {
					tableStacks += int64(len(w.table.stacks))
				}
				if w.key.res == indices.ResolutionHour && w.trie != nil {
					trieBytes += w.trie.bytes
					nn, _ := w.trie.counts()
					trieNodes += int64(nn)
				}
				for sk, ws := range w.series {
					if sk.kind != indices.KindStack {
						continue
					}
					c := int64(ws.count())
					if w.key.res == indices.ResolutionHour {
						hourDocs += c
					} else if w.key.res == indices.ResolutionMinute {
						minuteDocs += c
					}
				}
			}
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		t.Logf("%d records, event time %s: charged %d MB (stack cache %d MB); by resolution %v MB; 10-minute values %d MB (%d nodes); hour tries %d MB (%d nodes, %d stacks); stack documents: hours %d, minutes %d; heap %d MB",
			n, last.Format("15:04:05"), budget.Used()>>20, budget.CacheBytes()>>20, mb(byRes), values>>20, valueSet, trieBytes>>20, trieNodes, tableStacks, hourDocs, minuteDocs, ms.HeapAlloc>>20)
	}
	every := 2400
	if e, err := strconv.Atoi(os.Getenv("ROLLUP_RECORDS_EVERY")); err == nil && e > 0 {
		every = e
	}
	// cpu is the process's CPU time folding, the reports' GCs left out:
	// per host interval (a CPU and a memory profile), the figure part A
	// gives for the rollup, without Kafka, OpenSearch or JSON.
	var cpu time.Duration
	t0 := processCPU(t)
	for left > 0 {
		for i, rr := range readers {
			if done[i] {
				continue
			}
			rec, err := rr.next()
			if err == io.EOF {
				done[i] = true
				left--
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			meta, err := record.ParseMeta(rec.Headers)
			if err != nil {
				t.Fatal(err)
			}
			in, err := dec.Decode(rec.Value)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			in.Type, in.Host, in.Offset, in.Fallback = meta.Type, meta.Host, rec.Offset, last
			if tn := time.Unix(0, in.TimeNanos()); tn.After(last) {
				last = tn
			}
			if _, err := parts[i].Add(in); err != nil {
				t.Fatalf("add: %v", err)
			}
			n++
			if n%400 == 0 {
				for _, p := range parts {
					MarkStored(p.Pending(false))
					for h := p.EndedHour(time.Time{}); h != nil; h = p.EndedHour(h.Hour()) {
						for d := h.Next(16 << 20); len(d) > 0; d = h.Next(16 << 20) {
							MarkStored(d)
						}
					}
					p.Evict()
					if o, cp, ok := p.Commit(); ok {
						p.Committed(o, cp)
					}
				}
			}
			if n%every == 0 {
				cpu += processCPU(t) - t0
				report()
				t0 = processCPU(t)
			}
		}
	}
	cpu += processCPU(t) - t0
	report()
	t.Logf("CPU folding %v: %.2f ms per host interval (2 records)", cpu.Round(time.Millisecond), 2*float64(cpu.Microseconds())/1000/float64(n))
	held := stateHeap(&before, parts...)
	t.Logf("end, stack cache emptied: held %d MB, charged %d MB (%.0f%%)", held>>20, budget.Used()>>20, 100*float64(held)/float64(budget.Used()))
	if held > budget.Used() {
		t.Fatalf("the state holds %d bytes, the budget charged %d", held, budget.Used())
	}
	if f := os.Getenv("ROLLUP_RECORDS_HEAP"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		runtime.GC()
		if err := pprof.WriteHeapProfile(out); err != nil {
			t.Fatal(err)
		}
	}
	runtime.KeepAlive(parts)
}

func mb(m map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		out[k] = v >> 20
	}
	return out
}

// processCPU is the CPU time the process has used, user and system.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
