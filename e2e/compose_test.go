package e2e

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/kafka"
)

// composeEnv reads a setting of the compose stack under test; make e2e-compose
// (deploy/docker/e2e-compose.sh) sets them all.
func composeEnv(t *testing.T, name, def string) string {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	if def == "" {
		t.Fatalf("%s is not set (make e2e-compose sets it)", name)
	}
	return def
}

// TestCompose checks a stack that runs in containers (docker-compose.yml with
// deploy/docker/compose.local.yml, started by make e2e-compose): a workload on
// this host, profiled by the containerized agent, shows up symbolized in the
// containerized query API, with its records in the stack's Kafka topics and
// OpenSearch indices. Unlike TestPipeline it starts no service of its own; it
// only runs when STACKSTREAM_E2E_COMPOSE is set.
func TestCompose(t *testing.T) {
	if os.Getenv("STACKSTREAM_E2E_COMPOSE") == "" {
		t.Skip("checks a running compose stack: make e2e-compose runs it")
	}
	queryURL := strings.TrimSuffix(composeEnv(t, "STACKSTREAM_E2E_QUERY_URL", ""), "/")
	brokers := strings.Split(composeEnv(t, "STACKSTREAM_E2E_KAFKA_BROKERS", ""), ",")
	osURL := strings.TrimSuffix(composeEnv(t, "STACKSTREAM_E2E_OPENSEARCH_URL", ""), "/")
	indexerMetrics := composeEnv(t, "STACKSTREAM_E2E_INDEXER_METRICS", "")
	host := composeEnv(t, "STACKSTREAM_E2E_HOST_ID", "")
	topicPrefix := composeEnv(t, "STACKSTREAM_E2E_TOPIC_PREFIX", "stackstream.")
	indexPrefix := composeEnv(t, "STACKSTREAM_E2E_INDEX_PREFIX", "stackstream-")

	// The agent in compose.local.yml profiles processes whose comm starts with
	// e2e-compose: this workload, named so.
	work := filepath.Join(t.TempDir(), "e2e-compose-hot")
	if out, err := exec.Command("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", work, "testdata/hot.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	workload := exec.Command(work)
	if err := workload.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { workload.Process.Kill(); workload.Wait() })
	t.Logf("workload pid %d; query API %s, host %q", workload.Process.Pid, queryURL, host)

	base := queryURL + "/api/v1/"
	sel := url.QueryEscape(`{host="` + host + `"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The flame graph: the agent's stacks, symbolized by the symbolizer from the
	// debuginfo the agent published, indexed into OpenSearch; top functions.
	start := time.Now()
	total := checkHotWorkload(ctx, t, base, sel)
	t.Logf("flame graph: e2e_hot_loop after %s (%d samples)", time.Since(start).Round(time.Second), total)

	// The rollup service's minute buckets: CPU of the spinning workload, the only
	// process this agent profiles (a core when it has one; a shared CI machine
	// gives it less, and the first minute holds only the part since it started,
	// so any CPU at all).
	waitFor(ctx, t, "cpu series from the rollups (source rollups)", func() bool {
		var s struct {
			Source string `json:"source"`
			Series []struct {
				Points [][2]float64 `json:"points"`
			} `json:"series"`
		}
		// Until the first minute window is written the API answers from the
		// samples ("source": "samples"); only rollups prove the rollup service.
		if getJSON(base+"series?type=cpu&from=now-15m&to=now&group_by=host&query="+sel, &s) != nil || s.Source != "rollups" {
			return false
		}
		for _, ser := range s.Series {
			for _, p := range ser.Points {
				if p[1] > 0 {
					return true
				}
			}
		}
		return false
	})
	t.Logf("rollup series after %s", time.Since(start).Round(time.Second))

	waitFor(ctx, t, "search result for e2e_hot", func() bool {
		var res struct {
			Results []struct {
				Kind, Name string
			} `json:"results"`
		}
		if getJSON(base+"search?q=e2e_hot&from=now-15m&to=now", &res) != nil {
			return false
		}
		for _, r := range res.Results {
			if r.Kind == "function" && r.Name == "e2e_hot_loop" {
				return true
			}
		}
		return false
	})

	if fast := metricValue(t, indexerMetrics, `stackstream_indexer_decoded_records_total{path="fast"}`); fast == 0 {
		t.Errorf("the containerized indexer decoded no record on its fast path")
	}

	// The records went through the stack's own broker and node: its topics
	// hold them, its samples indices count them.
	cl, err := kafka.NewClient(ctx, kafka.Config{Brokers: brokers, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics := kafka.Config{TopicPrefix: topicPrefix}.Topics()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics.ProfilesRaw, topics.ProfilesSymbolized, topics.Debuginfo)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{topics.ProfilesRaw, topics.ProfilesSymbolized, topics.Debuginfo} {
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == topic && o.Err == nil {
				n += o.Offset
			}
		})
		if n == 0 {
			t.Errorf("topic %s on %s holds no record", topic, brokers[0])
		} else {
			t.Logf("topic %s: %d records", topic, n)
		}
	}
	var count struct {
		Count int64 `json:"count"`
	}
	if err := getJSON(osURL+"/"+indexPrefix+"samples-*/_count", &count); err != nil {
		t.Fatal(err)
	}
	if count.Count == 0 {
		t.Errorf("no sample documents in %s%s", osURL, "/"+indexPrefix+"samples-*")
	}
	t.Logf("%d sample documents in %s", count.Count, indexPrefix+"samples-*")
}
