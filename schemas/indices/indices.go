// Package indices is the OpenSearch contract (see schemas/opensearch.md): index
// templates, index names chosen by event time, document shapes and their
// deterministic IDs.
package indices

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
)

//go:embed templates/*.json
var templateFS embed.FS

// DefaultPrefix starts every index and template name. Tests and tenants
// sharing one cluster use their own prefix.
const DefaultPrefix = "stackstream-"

// Index kinds, appended to the prefix.
const (
	stacksName  = "stacks"
	samplesName = "samples"
	rollupsName = "rollups"
)

// Names derives every index, pattern and template name from one prefix.
type Names struct{ Prefix string }

// Default are the names of DESIGN.md.
var Default = Names{Prefix: DefaultPrefix}

// Stacks is the single stacks index.
func (n Names) Stacks() string { return n.Prefix + stacksName }

// Samples is the daily samples index holding events at t.
func (n Names) Samples(t time.Time) string {
	return n.Prefix + samplesName + "-" + t.UTC().Format("2006.01.02")
}

// Rollups is the monthly rollups index holding windows starting at t.
func (n Names) Rollups(t time.Time) string {
	return n.Prefix + rollupsName + "-" + t.UTC().Format("2006.01")
}

// SamplesPattern matches every daily samples index.
func (n Names) SamplesPattern() string { return n.Prefix + samplesName + "-*" }

// RollupsPattern matches every monthly rollups index.
func (n Names) RollupsPattern() string { return n.Prefix + rollupsName + "-*" }

// Index generations (docs/STACKCTL.md, "Index generations"): the names above
// are what services read and write. From generation 1 on they are aliases,
// each pointing to one physical index of the current generation, named
// <prefix><kind>_g<N>[-<period>]; stackctl reindex fills generation N+1 and
// moves every alias in one request. Generation 0 is the layout from before
// generations: physical indices carrying the alias names themselves.

// generationMark separates the kind from the generation in a physical name;
// "_" keeps <prefix>samples-* (the readers' pattern) from matching physical
// indices, and keeps the three templates' patterns disjoint.
const generationMark = "_g"

// Physical is the physical index behind alias (a name of Stacks, Samples or
// Rollups) in generation gen; generation 0 is the alias name itself.
func (n Names) Physical(gen int, alias string) string {
	if gen <= 0 {
		return alias
	}
	for _, k := range kinds {
		base := n.Prefix + k
		if rest, ok := strings.CutPrefix(alias, base); ok && (rest == "" || rest[0] == '-') {
			return base + generationMark + strconv.Itoa(gen) + rest
		}
	}
	return alias
}

// Generation reads a physical index name: its generation and the alias it
// stands for. A name of generation 0 is its own alias. ok is false for a
// name that is not one of these indices.
func (n Names) Generation(index string) (gen int, alias string, ok bool) {
	for _, k := range kinds {
		base := n.Prefix + k
		rest, found := strings.CutPrefix(index, base)
		if !found {
			continue
		}
		if rest == "" || rest[0] == '-' {
			return 0, index, true
		}
		num, found := strings.CutPrefix(rest, generationMark)
		if !found {
			continue
		}
		digits, period, _ := strings.Cut(num, "-")
		g, err := strconv.Atoi(digits)
		if err != nil || g < 1 || strconv.Itoa(g) != digits {
			continue
		}
		if period != "" {
			period = "-" + period
		} else if strings.HasSuffix(num, "-") {
			continue
		}
		return g, base + period, true
	}
	return 0, "", false
}

// GenerationPatterns match every physical index of generation gen (gen >= 1).
func (n Names) GenerationPatterns(gen int) []string {
	g := generationMark + strconv.Itoa(gen)
	return []string{n.Prefix + stacksName + g, n.Prefix + samplesName + g + "-*", n.Prefix + rollupsName + g + "-*"}
}

// AliasPatterns match every name services use: the aliases, or in
// generation 0 the physical indices carrying those names.
func (n Names) AliasPatterns() []string {
	return []string{n.Stacks(), n.SamplesPattern(), n.RollupsPattern()}
}

// IndexTime parses the date out of a daily or monthly index name, alias or
// physical index of any generation, so retention can delete whole indices by
// age.
func (n Names) IndexTime(index string) (time.Time, bool) {
	if _, alias, ok := n.Generation(index); ok {
		index = alias
	}
	if d, ok := strings.CutPrefix(index, n.Prefix+samplesName+"-"); ok {
		t, err := time.Parse("2006.01.02", d)
		return t, err == nil
	}
	if d, ok := strings.CutPrefix(index, n.Prefix+rollupsName+"-"); ok {
		t, err := time.Parse("2006.01", d)
		return t, err == nil
	}
	return time.Time{}, false
}

// IndexEnd is when the period a daily samples or monthly rollups index holds
// ends: retention deletes an index once that is old enough.
func (n Names) IndexEnd(index string) (time.Time, bool) {
	if _, alias, ok := n.Generation(index); ok {
		index = alias
	}
	t, ok := n.IndexTime(index)
	switch {
	case !ok:
		return t, false
	case strings.HasPrefix(index, n.Prefix+samplesName+"-"):
		return t.AddDate(0, 0, 1), true
	default:
		return t.AddDate(0, 1, 0), true
	}
}

// Settings overrides the index settings of the templates.
type Settings struct {
	Shards          int    // 0 keeps the template's
	Replicas        int    // -1 keeps the template's
	RefreshInterval string // "" keeps the template's
}

// DefaultSettings keeps every template setting as written.
var DefaultSettings = Settings{Replicas: -1}

// Template is one index template ready to PUT to _index_template/{Name}.
type Template struct {
	Name string
	Body []byte
}

// kinds are the index kinds, each with its own template.
var kinds = []string{stacksName, samplesName, rollupsName}

// TemplateNames are the names the templates are stored under.
func (n Names) TemplateNames() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = n.Prefix + k
	}
	return out
}

// Templates returns the three index templates for these names with s applied.
func (n Names) Templates(s Settings) ([]Template, error) {
	// Each template matches the names of generation 0 and the physical
	// indices of every later generation.
	files := []struct{ kind, pattern string }{
		{stacksName, n.Stacks()},
		{samplesName, n.SamplesPattern()},
		{rollupsName, n.RollupsPattern()},
	}
	out := make([]Template, 0, len(files))
	for _, f := range files {
		file := "templates/" + f.kind + ".json"
		raw, err := templateFS.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read template %s: %w", file, err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("parse template %s: %w", file, err)
		}
		doc["index_patterns"] = []string{f.pattern, n.Prefix + f.kind + generationMark + "*"}
		idx := doc["template"].(map[string]any)["settings"].(map[string]any)["index"].(map[string]any)
		if s.Shards > 0 {
			idx["number_of_shards"] = s.Shards
		}
		if s.Replicas >= 0 {
			idx["number_of_replicas"] = s.Replicas
		}
		if s.RefreshInterval != "" {
			idx["refresh_interval"] = s.RefreshInterval
		}
		body, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("encode template %s: %w", file, err)
		}
		out = append(out, Template{Name: n.Prefix + f.kind, Body: body})
	}
	return out, nil
}

// Frame is one symbolized stack frame.
type Frame struct {
	Function string `json:"function"`
	File     string `json:"file,omitempty"`
	Line     int64  `json:"line,omitempty"`
	Binary   string `json:"binary,omitempty"`
	// Kind is record.FrameKind of the frame's mapping file (kernel,
	// python, java, js, jit); empty for native code, the most frames, to
	// keep documents small. It is not part of StackID: it follows from
	// Binary, the pseudo-file's name.
	Kind string `json:"kind,omitempty"`
}

// FrameKind is the kind of f: Kind, or for frames stored without one
// (native frames, and stacks written before schema 2) the kind of its
// binary, which for the agent's pseudo-files is the file itself.
func (f Frame) FrameKind() string {
	if f.Kind != "" {
		return f.Kind
	}
	return record.FrameKind(f.Binary)
}

// StackDoc is a document of stackstream-stacks. Frames are leaf first, as in pprof.
type StackDoc struct {
	Timestamp time.Time `json:"@timestamp"`
	Frames    []Frame   `json:"frames"`
	// Functions, Leaf and Depth are mapped, but no reader uses them: the
	// indexer leaves them out (their postings and doc values cost bytes on
	// every stack); stacks written before have them.
	Functions []string `json:"functions,omitempty"`
	Leaf      string   `json:"leaf,omitempty"`
	Depth     int      `json:"depth,omitempty"`
	// Kinds are the distinct kinds of the frames, native included, sorted
	// (schema 2): the keyword that finds the stacks holding Python frames.
	Kinds []string `json:"kinds,omitempty"`
	// LastSeen is the newest day (2006-01-02, UTC) a profile used the stack
	// (schema 3): the indexer moves it forward once a day per stack, and
	// retention deletes the stacks no profile used for longer than every
	// index that can refer to them is kept.
	LastSeen string `json:"last_seen,omitempty"`
}

// DayOf is the LastSeen form of t.
func DayOf(t time.Time) string { return t.UTC().Format("2006-01-02") }

// TouchStackScript moves a stored stack's last_seen forward to params.day,
// and leaves a newer one (a replay of old profiles) as it is, writing
// nothing then.
func TouchStackScript(day string) map[string]any {
	return map[string]any{
		"lang":   "painless",
		"source": "if (ctx._source.last_seen == null || ctx._source.last_seen.compareTo(params.day) < 0) { ctx._source.last_seen = params.day } else { ctx.op = 'none' }",
		"params": map[string]any{"day": day},
	}
}

// StackKinds are the distinct kinds of frames as stored (an empty Kind is
// native), sorted, as StackDoc.Kinds.
func StackKinds(frames []Frame) []string {
	var out []string
	for _, f := range frames {
		k := f.Kind
		if k == "" {
			k = record.KindNative
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// SampleDoc is a document of stackstream-samples-YYYY.MM.DD: the samples of
// one profile with one label set. StackIDs and StackValues are set with
// SetStacks and read with Stacks (see stackvalues.go); Value is the total,
// stacks or not, and Count the raw samples merged.
//
// Labels holds the contract labels only (record.ContractLabels, each mapped
// as labels.<name>); every other label is a "name=value" string of
// LabelPairs and its name in LabelNames, so that label keys cannot add
// fields to the mapping. SetLabels fills the three from one label set.
type SampleDoc struct {
	Timestamp   time.Time         `json:"@timestamp"`
	Type        string            `json:"type"`
	Host        string            `json:"host"`
	Service     string            `json:"service"`
	StackIDs    []string          `json:"stack_id,omitempty"`
	StackValues []byte            `json:"stack_values,omitempty"`
	Value       int64             `json:"value"`
	Count       int64             `json:"count,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	LabelPairs  []string          `json:"label_pairs,omitempty"`
	LabelNames  []string          `json:"label_names,omitempty"`
}

// SetLabels stores labels in d: the contract labels in Labels, the others
// as sorted LabelPairs and LabelNames. Keys and values are taken as they
// are; the indexer validates and caps them before.
func (d *SampleDoc) SetLabels(labels map[string]string) {
	d.Labels, d.LabelPairs, d.LabelNames = nil, nil, nil
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if record.IsContractLabel(k) {
			if d.Labels == nil {
				d.Labels = map[string]string{}
			}
			d.Labels[k] = labels[k]
			continue
		}
		d.LabelPairs = append(d.LabelPairs, LabelPair(k, labels[k]))
		d.LabelNames = append(d.LabelNames, k)
	}
}

// LabelPair is the label_pairs entry of a label: "name=value". A name holds
// no "=" (record.ValidLabelKey), so the first "=" splits it.
func LabelPair(name, value string) string { return name + "=" + value }

// Rollup kinds and resolutions.
const (
	KindService  = "service"
	KindFunction = "function"
	// KindStack is one stack of a (type, service, host) window, written
	// before rollups schema 3; KindStacks every stack of the window in
	// one document, packed as samples documents are (stackrollups.go).
	KindStack  = "stack"
	KindStacks = "stacks"
	// KindTree is a pre-merged call tree of a (type, service, host) hour
	// (tree.go); KindServiceTree one of a (type, service) hour over the
	// hosts of one Kafka partition, for selections naming no host; and
	// KindPartitionTree one of a type's hour over every service and host of
	// one partition, for selections naming neither.
	KindTree          = "tree"
	KindServiceTree   = "service_tree"
	KindPartitionTree = "partition_tree"

	ResolutionMinute = "1m"
	// ResolutionTenMinutes is for service and partition_tree documents
	// only: 10-minute windows, UTC-aligned, so a range's edges read a few
	// trees instead of every minute's stacks (schemas/opensearch.md,
	// "Part-hour documents").
	ResolutionTenMinutes = "10m"
	ResolutionHour       = "1h"
	// ResolutionDay is only for partition trees: a settled day's hour
	// partition trees merged (daytrees.go).
	ResolutionDay = "1d"
)

// WindowSize is the length of the windows of a rollup resolution
// (ResolutionMinute, ResolutionTenMinutes, ResolutionHour); a minute for
// any other.
func WindowSize(res string) time.Duration {
	switch res {
	case ResolutionHour:
		return time.Hour
	case ResolutionTenMinutes:
		return 10 * time.Minute
	}
	return time.Minute
}

// RollupDoc is a document of stackstream-rollups-YYYY.MM.
type RollupDoc struct {
	Timestamp  time.Time `json:"@timestamp"`
	Resolution string    `json:"resolution"`
	Kind       string    `json:"kind"`
	Type       string    `json:"type"`
	Service    string    `json:"service"`
	Host       string    `json:"host,omitempty"`
	Function   string    `json:"function,omitempty"`
	// StackIDs is the one stack of a KindStack document, or the sorted
	// stacks of a KindStacks document, whose values StackValues packs
	// (SetStacks, Stacks).
	StackIDs    []string `json:"stack_id,omitempty"`
	StackValues []byte   `json:"stack_values,omitempty"`
	Value       int64    `json:"value,omitempty"`
	Self        int64    `json:"self,omitempty"`
	Total       int64    `json:"total,omitempty"`
	Samples     int64    `json:"samples,omitempty"`
	Cores       float64  `json:"cores,omitempty"`
	MemAvg      float64  `json:"mem_avg,omitempty"`
	MemMax      int64    `json:"mem_max,omitempty"`
	// StackValue is, in a service document, the part of Value in samples
	// with a stack: what the window's trees add up to.
	StackValue int64 `json:"stack_value,omitempty"`
	// Partition is the Kafka partition of a service or partition tree.
	Partition int32 `json:"partition,omitempty"`
	// Tree is a tree document's encoded tree (tree.go); Value is its total.
	Tree []byte `json:"tree,omitempty"`
	// Sources is, in a day tree, the fingerprint of the hour trees merged
	// into it (TreeSources).
	Sources string `json:"sources,omitempty"`
	// Digest is, in an hour partition tree, TreeDigest of its tree: the
	// Sources of the function table made from it (functable.go).
	Digest string `json:"digest,omitempty"`
}

// hashID is a short, URL-safe, deterministic ID of parts (96 bits: collisions
// are negligible at fleet scale, and short IDs keep the samples index small).
func hashID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:12])
}

// StackID is the _id of a stack: a hash of its frames, leaf first. It is
// hashID of (function, file, line, binary) for each frame; a stack whose
// text fits 8 KiB (nearly all) is written into one buffer on the stack and
// hashed at once: the indexer computes it for every stack its cache misses,
// and a Write per part was half of its cost. Longer ones are hashed part by
// part, so a hostile stack of long names costs no buffer of its size.
func StackID(frames []Frame) string {
	var stack [8192]byte
	b := stack[:0]
	for _, f := range frames {
		// 20 digits of the line at most, and 4 separators.
		if len(b)+len(f.Function)+len(f.File)+len(f.Binary)+24 > len(stack) {
			return stackIDParts(frames)
		}
		b = AppendStackText(b, f)
	}
	sum := sha256.Sum256(b)
	return StackIDOfSum(sum[:])
}

// AppendStackText appends frame f's part of the text whose sha256 is a
// stack's ID: its function, file, line (decimal) and binary, each followed
// by a zero byte (hashID's parts). A stack's text is its frames' texts one
// after the other, so the rollup keeps each location's text and hashes a
// new stack's without naming its frames again.
func AppendStackText(b []byte, f Frame) []byte {
	b = append(append(b, f.Function...), 0)
	b = append(append(b, f.File...), 0)
	b = append(strconv.AppendInt(b, f.Line, 10), 0)
	return append(append(b, f.Binary...), 0)
}

// StackIDOfSum is the ID of the stack whose text (AppendStackText) has
// the sha256 sum.
func StackIDOfSum(sum []byte) string {
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

func stackIDParts(frames []Frame) string {
	parts := make([]string, 0, len(frames)*4)
	for _, f := range frames {
		parts = append(parts, f.Function, f.File, strconv.FormatInt(f.Line, 10), f.Binary)
	}
	return hashID(parts...)
}

// SampleID is the _id of a sample document: one per (profile, label set),
// where a profile is identified by host, type and its own time. A replay
// overwrites the whole document, so re-symbolized stacks replace the old ones.
func SampleID(host, profileType string, profileTime time.Time, labels map[string]string) string {
	return SampleIDPart(host, profileType, profileTime, "", labels)
}

// SampleIDPart is SampleID for one part of a profile split into several
// records (record.HeaderPart): the parts share host, type and time, and a
// process present in two of them must get two documents. An empty part is
// SampleID, so records that were not split keep the IDs they always had. The
// part goes right after the time: labels add an even number of hashed
// strings, so an ID with a part never equals one without.
func SampleIDPart(host, profileType string, profileTime time.Time, part string, labels map[string]string) string {
	parts := make([]string, 0, 4+2*len(labels))
	parts = append(parts, host, profileType, strconv.FormatInt(profileTime.UnixNano(), 10))
	if part != "" {
		parts = append(parts, part)
	}
	parts = append(parts, sortedLabels(labels)...)
	return hashID(parts...)
}

// RollupID is the _id of a rollup document for one window and key. A
// KindStacks document is keyed by its series (type, service, host) alone:
// a replay rewrites it whole, re-symbolized stacks and all.
func RollupID(d *RollupDoc) string {
	if d.Kind == KindServiceTree || d.Kind == KindPartitionTree || d.Kind == KindPartitionHead || d.Kind == KindFunctionTable {
		return hashID(d.Resolution, d.Kind, d.Type, strconv.FormatInt(d.Timestamp.Unix(), 10), d.Service, strconv.Itoa(int(d.Partition)))
	}
	stack := ""
	if d.Kind == KindStack && len(d.StackIDs) == 1 {
		stack = d.StackIDs[0]
	}
	return hashID(d.Resolution, d.Kind, d.Type, strconv.FormatInt(d.Timestamp.Unix(), 10), d.Service, d.Host, d.Function, stack)
}

func sortedLabels(l map[string]string) []string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	// Insertion sort: label sets are small.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, l[k])
	}
	return out
}
