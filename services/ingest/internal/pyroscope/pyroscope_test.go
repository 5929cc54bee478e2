package pyroscope

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

func TestParseName(t *testing.T) {
	tests := []struct {
		name, in string
		want     Name
		wantErr  string
	}{
		{"plain", "checkout", Name{App: "checkout"}, ""},
		{"suffix", "checkout.cpu", Name{App: "checkout", Suffix: "cpu"}, ""},
		{"dotted app keeps its dots", "simple.golang.app", Name{App: "simple.golang.app"}, ""},
		{"tags", "app.alloc_space{env=prod, region = eu-1,}", Name{App: "app", Suffix: "alloc_space",
			Tags: []Tag{{"env", "prod"}, {"region", "eu-1"}}}, ""},
		{"empty value dropped", "app{a=,b=1}", Name{App: "app", Tags: []Tag{{"b", "1"}}}, ""},
		{"go sdk", "x{__session_id__=abc,otel.scope.name=com.grafana.pyroscope/go}", Name{App: "x",
			Tags: []Tag{{"__session_id__", "abc"}, {"otel.scope.name", "com.grafana.pyroscope/go"}}}, ""},
		{"no app", "{a=b}", Name{}, "no application name"},
		{"empty", "", Name{}, "no application name"},
		{"unclosed", "app{a=b", Name{}, "do not end with }"},
		{"not key=value", "app{ab}", Name{}, "not key=value"},
		{"brace in value", "app{a=b{c}", Name{}, "contains one of"},
		{"control", "app\x01", Name{}, "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseName(tt.in)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseName(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseName(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseNameTooManyTags(t *testing.T) {
	var b strings.Builder
	b.WriteString("app{")
	for i := range MaxTags + 1 {
		b.WriteString("k")
		b.WriteString(strings.Repeat("x", i))
		b.WriteString("=v,")
	}
	b.WriteString("}")
	if _, err := ParseName(b.String()); err == nil || !strings.Contains(err.Error(), "more than 64 tags") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseTime(t *testing.T) {
	want := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, in := range []string{"1796040000", "1796040000000", "1796040000000000", "1796040000000000000", "2026-11-30T12:00:00Z"} {
		got, err := ParseTime(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "now", "12:00"} {
		if _, err := ParseTime(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseTime(%s) error = %v", in, err)
		}
	}
}

func cpuSpec() SampleSpec {
	cpu := &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	return SampleSpec{Types: []*profile.ValueType{{Type: "samples", Unit: "count"}, cpu}, Factor: []int64{1, 1e7}, PeriodType: cpu, Period: 1e7}
}

func TestParseFolded(t *testing.T) {
	body := "main;work;hot 30\r\nmain;work;hot 12\nmain;idle (idle.py:3) 5\n\nmain;zero 0\n"
	p, err := ParseFolded([]byte(body), cpuSpec(), DefaultFoldedLimits())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	got := map[string][]int64{}
	for _, s := range p.Sample {
		var names []string
		for _, loc := range s.Location {
			names = append(names, loc.Line[0].Function.Name)
		}
		got[strings.Join(names, "<")] = s.Value
	}
	want := map[string][]int64{
		"hot<work<main":         {42, 42e7},
		"idle (idle.py:3)<main": {5, 5e7},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("samples = %v, want %v", got, want)
	}
	if len(p.Function) != 4 {
		t.Errorf("functions = %d, want 4 (shared)", len(p.Function))
	}
}

func TestParseFoldedErrors(t *testing.T) {
	small := FoldedLimits{MaxSamples: 2, MaxDepth: 3, MaxFunctions: 4, MaxFrameBytes: 8}
	tests := []struct {
		name, body string
		want       error
		msg        string
	}{
		{"no count", "a;b\n", ErrInvalid, "no count"},
		{"bad count", "a;b x\n", ErrInvalid, "not a non-negative integer"},
		{"negative", "a;b -3\n", ErrInvalid, "not a non-negative integer"},
		{"deep", "a;b;c;d 1\n", record.ErrTooLarge, "4 frames, limit 3"},
		{"stacks", "a 1\nb 1\nc 1\n", record.ErrTooLarge, "more than 2 distinct stacks"},
		{"functions", "a;b;c 1\nd;e 1\n", record.ErrTooLarge, "more than 4 distinct frames"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFolded([]byte(tt.body), cpuSpec(), small)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v %q", err, tt.want, tt.msg)
			}
		})
	}
	p, err := ParseFolded([]byte(strings.Repeat("é", 10)+" 1\n"), cpuSpec(), small)
	if err != nil || p.Function[0].Name != "éééé" {
		t.Fatalf("long frame: %v %v", p, err)
	}
}

func TestDecodePush(t *testing.T) {
	req := pushRequest([]Tag{{"__name__", "process_cpu"}, {"service_name", "py"}}, []byte("PPROF"))
	got, err := DecodePush(req, DefaultPushLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Labels) != 2 || got[0].Labels[1] != (Tag{"service_name", "py"}) || string(got[0].Profiles[0]) != "PPROF" {
		t.Fatalf("got %+v", got)
	}
	if _, err := DecodePush([]byte{0x0a, 0xff}, DefaultPushLimits); !errors.Is(err, ErrInvalid) {
		t.Fatalf("truncated: %v", err)
	}
	var many []byte
	for range 3 {
		many = append(many, req...)
	}
	if _, err := DecodePush(many, PushLimits{MaxSeries: 2, MaxProfiles: 10, MaxLabels: 10}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("3 series, limit 2: %v", err)
	}
}
