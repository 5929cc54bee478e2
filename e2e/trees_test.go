package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

type treeNode struct {
	Name     string     `json:"name"`
	Self     int64      `json:"self"`
	Total    int64      `json:"total"`
	Children []treeNode `json:"children"`
}

// TestTreesFromTopic: the rollup writes an hour's pre-merged trees from
// symbolized profiles on the real topic, and the query answers that hour's
// flame graph from them: 60,000 distinct stacks (more than the query's old
// 50,000-stack limit), every node exact against a brute-force sum, for the
// whole fleet (partition trees) and for one host (host trees).
func TestTreesFromTopic(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	osURL := testenv.OpenSearchURL(t)
	bin := buildSome(t, "stackctl", "stackstream-rollup", "stackstream-query")

	name := testenv.Name(t, "e2e-trees-")
	queryAddr := freeAddr(t)
	env := []string{
		"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"STACKSTREAM_KAFKA_TOPIC_PREFIX=" + name + ".",
		"STACKSTREAM_OPENSEARCH_URL=" + osURL,
		"STACKSTREAM_OPENSEARCH_INDEX_PREFIX=" + name + "-",
		"STACKSTREAM_OPENSEARCH_INDEX_REFRESH_INTERVAL=1s",
		"STACKSTREAM_CTL_PARTITIONS=2",
		"STACKSTREAM_ROLLUP_GROUP=" + name + "-rollup",
		"STACKSTREAM_ROLLUP_IDLE_FLUSH=2s",
		"STACKSTREAM_QUERY_LISTEN_ADDR=" + queryAddr,
	}
	t.Cleanup(func() { cleanup(t, brokers, name, osURL) })
	ctl := exec.Command(filepath.Join(bin, "stackctl"), "init")
	ctl.Env = append(os.Environ(), env...)
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("stackctl init: %v\n%s", err, out)
	}
	start(t, filepath.Join(bin, "stackstream-rollup"), append(env, "STACKSTREAM_LISTEN_ADDR="+freeAddr(t)))
	start(t, filepath.Join(bin, "stackstream-query"), append(env, "STACKSTREAM_LISTEN_ADDR="+freeAddr(t)))

	// Six profiles of two hosts in an hour that ended over an hour ago,
	// 10,000 distinct stacks each; then one profile now, so the rollup's
	// watermark passes the hour and writes it.
	hour := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	const period = 52631578
	hosts := []string{name + "-a", name + "-b"}
	fleet, byHost := map[string][2]int64{}, map[string]map[string][2]int64{}
	add := func(m map[string][2]int64, path []string, v int64) {
		for i := range path {
			k := strings.Join(path[:i+1], ";")
			n := m[k]
			n[1] += v
			if i == len(path)-1 {
				n[0] += v
			}
			m[k] = n
		}
	}
	var recs []*kgo.Record
	topic := kafka.Config{TopicPrefix: name + "."}.Topics().ProfilesSymbolized
	for p := 0; p < 6; p++ {
		host := hosts[p%2]
		if byHost[host] == nil {
			byHost[host] = map[string][2]int64{}
		}
		b := pproftest.NewCPU(hour.Add(time.Duration(p)*7*time.Minute), 10*time.Second)
		labels := map[string]string{record.LabelService: "checkout", record.LabelPID: "1"}
		for i := 0; i < 10000; i++ {
			s := p*10000 + i
			path := []string{"main", fmt.Sprintf("handler%d", s%10), fmt.Sprintf("mod%d", s%97), fmt.Sprintf("leaf%d", s)}
			v := int64(s%5+1) * period
			leafFirst := []string{path[3], path[2], path[1], path[0]}
			b.Sample(labels, []int64{v / period, v}, leafFirst...)
			add(fleet, path, v)
			add(byHost[host], path, v)
		}
		raw, err := record.EncodeProfile(b.Profile())
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(host), Value: raw,
			Headers: record.Meta{Type: record.ProfileCPU, Host: host, AgentVersion: "e2e-trees"}.Headers()})
	}
	for _, host := range hosts {
		b := pproftest.NewCPU(time.Now(), 10*time.Second)
		b.Sample(map[string]string{record.LabelService: "checkout", record.LabelPID: "1"}, []int64{1, period}, "main")
		raw, err := record.EncodeProfile(b.Profile())
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(host), Value: raw,
			Headers: record.Meta{Type: record.ProfileCPU, Host: host, AgentVersion: "e2e-trees"}.Headers()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := mustClient(t, brokers)
	defer cl.Close()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	base := "http://" + queryAddr + "/api/v1/"
	for _, c := range []struct {
		query, source string
		want          map[string][2]int64
	}{
		{"", "partition_trees", fleet},
		{`{host="` + hosts[0] + `"}`, "trees", byHost[hosts[0]]},
	} {
		var fg struct {
			Total     int64    `json:"total"`
			Truncated bool     `json:"truncated"`
			Folded    int      `json:"folded"`
			Source    string   `json:"source"`
			Root      treeNode `json:"root"`
		}
		params := url.Values{"type": {"cpu"}, "from": {hour.Format(time.RFC3339)}, "to": {hour.Add(time.Hour).Format(time.RFC3339)}, "max_nodes": {"100000"}}
		if c.query != "" {
			params.Set("query", c.query)
		}
		waitFor(ctx, t, "the hour's flame graph from "+c.source, func() bool {
			return getJSON(base+"flamegraph?"+params.Encode(), &fg) == nil && fg.Source == c.source && fg.Total == c.want["main"][1]
		})
		got := map[string][2]int64{}
		var walk func(n treeNode, prefix string)
		walk = func(n treeNode, prefix string) {
			for _, k := range n.Children {
				p := strings.TrimPrefix(prefix+";"+k.Name, ";")
				got[p] = [2]int64{k.Self, k.Total}
				walk(k, p)
			}
		}
		walk(fg.Root, "")
		if fg.Truncated || fg.Folded != 0 || len(got) != len(c.want) {
			t.Fatalf("%s: truncated %v, folded %d, %d nodes, want %d", c.source, fg.Truncated, fg.Folded, len(got), len(c.want))
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Fatalf("%s: node %s: %v, want %v", c.source, k, got[k], v)
			}
		}
		t.Logf("%s: %d nodes exact, total %d", c.source, len(got), fg.Total)
	}
}
