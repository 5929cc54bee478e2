package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/replay"
)

// Status prints brokers, topics with partitions and per-group lag, the
// OpenSearch cluster health, templates and stackstream indices.
func Status(ctx context.Context, cfg Config, adm *kadm.Client, os *opensearchapi.Client, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	if err := kafkaStatus(ctx, cfg, adm, tw); err != nil {
		return err
	}
	return openSearchStatus(ctx, cfg, os, tw)
}

func kafkaStatus(ctx context.Context, cfg Config, adm *kadm.Client, tw *tabwriter.Writer) error {
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("list brokers: %w", err)
	}
	fmt.Fprintln(tw, "KAFKA BROKER\tHOST\tPORT\t")
	for _, b := range brokers {
		fmt.Fprintf(tw, "%d\t%s\t%d\t\n", b.NodeID, b.Host, b.Port)
	}
	names := cfg.Kafka.Topics().All()
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	lags := groupLags(ctx, adm)
	fmt.Fprintln(tw, "\nTOPIC\tPARTITIONS\tRECORDS (END OFFSETS)\tGROUP LAG\t")
	for _, name := range names {
		d, ok := details[name]
		if !ok || d.Err != nil {
			fmt.Fprintf(tw, "%s\tmissing\t\t(run stackctl init)\t\n", name)
			continue
		}
		var end int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == name {
				end += o.Offset
			}
		})
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t\n", name, len(d.Partitions), end, lags[name])
	}
	return nil
}

// groupLags returns, per topic, "group=lag" for every group consuming it:
// records past how far it got (replay.PartitionLag: a rollup's commit
// trails the records it handled, which its metadata names).
func groupLags(ctx context.Context, adm *kadm.Client) map[string]string {
	out := map[string]string{}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return out
	}
	lags, err := adm.Lag(ctx, groups.Groups()...)
	if err != nil {
		return out
	}
	per := map[string][]string{}
	for _, l := range lags.Sorted() {
		for topic, parts := range l.Lag {
			var total int64
			for _, p := range parts {
				if p.Err != nil {
					continue // its end offset or its commit could not be read
				}
				var start int64
				if p.Start.Err == nil {
					start = p.Start.Offset
				}
				lag, _ := replay.PartitionLag(p.Commit.At, p.Commit.Metadata, start, p.End.Offset)
				total += lag
			}
			per[topic] = append(per[topic], fmt.Sprintf("%s=%d", l.Group, total))
		}
	}
	for t, v := range per {
		sort.Strings(v)
		out[t] = strings.Join(v, " ")
	}
	return out
}

func openSearchStatus(ctx context.Context, cfg Config, cl *opensearchapi.Client, tw *tabwriter.Writer) error {
	var health struct {
		Status    string `json:"status"`
		Nodes     int    `json:"number_of_nodes"`
		Cluster   string `json:"cluster_name"`
		Unassigns int    `json:"unassigned_shards"`
	}
	if err := getJSON(ctx, cl, "/_cluster/health", &health); err != nil {
		return err
	}
	fmt.Fprintf(tw, "\nOPENSEARCH CLUSTER\tSTATUS\tNODES\tUNASSIGNED SHARDS\t\n%s\t%s\t%d\t%d\t\n", health.Cluster, health.Status, health.Nodes, health.Unassigns)

	var tpls struct {
		IndexTemplates []struct {
			Name          string `json:"name"`
			IndexTemplate struct {
				Patterns []string `json:"index_patterns"`
			} `json:"index_template"`
		} `json:"index_templates"`
	}
	if err := getJSON(ctx, cl, "/_index_template/"+cfg.Index.Prefix+"*", &tpls); err != nil {
		return err
	}
	fmt.Fprintln(tw, "\nINDEX TEMPLATE\tPATTERNS\t")
	for _, t := range tpls.IndexTemplates {
		fmt.Fprintf(tw, "%s\t%s\t\n", t.Name, strings.Join(t.IndexTemplate.Patterns, ","))
	}
	if len(tpls.IndexTemplates) == 0 {
		fmt.Fprintln(tw, "(none)\t(run stackctl init)\t")
	}

	var idx []struct {
		Index  string `json:"index"`
		Docs   string `json:"docs.count"`
		Size   string `json:"store.size"`
		Health string `json:"health"`
	}
	if err := getJSON(ctx, cl, "/_cat/indices/"+cfg.Index.Prefix+"*?format=json&bytes=b&s=index", &idx); err != nil {
		return err
	}
	// Which generation serves, and the names each physical index serves
	// under (docs/STACKCTL.md, "Index generations").
	layout, err := opensearch.ReadLayout(ctx, cl, cfg.Index.Names())
	if err != nil {
		return err
	}
	names := cfg.Index.Names()
	fmt.Fprintf(tw, "\nINDEX GENERATION\tSERVING\tPRESENT\t\n%s\t%d\t%v\t\n", cfg.Index.Prefix, layout.Current(names), layout.Generations())
	fmt.Fprintln(tw, "\nINDEX\tSERVES AS\tHEALTH\tDOCS\tSIZE (BYTES)\t")
	for _, i := range idx {
		serves := "-"
		if p, ok := layout[i.Index]; ok && p.Gen == 0 {
			serves = "itself (generation 0)"
		} else if ok && len(p.Aliases) > 0 {
			serves = strings.Join(p.Aliases, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", i.Index, serves, i.Health, i.Docs, i.Size)
	}
	if len(idx) == 0 {
		fmt.Fprintln(tw, "(none yet)\t\t\t\t\t")
	}
	return nil
}

func getJSON(ctx context.Context, cl *opensearchapi.Client, path string, v any) error {
	return requestJSON(ctx, cl, http.MethodGet, path, nil, v)
}

// requestJSON sends body (nil: none) to path and decodes the answer into
// v; a 404 leaves v as it is.
func requestJSON(ctx context.Context, cl *opensearchapi.Client, method, path string, body []byte, v any) error {
	status, resp, err := opensearch.Raw(ctx, cl, method, path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", strings.ToLower(method), path, err)
	}
	if status == http.StatusNotFound {
		return nil
	}
	if status != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", strings.ToLower(method), path, status, resp)
	}
	if err := json.Unmarshal(resp, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
