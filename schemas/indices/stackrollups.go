package indices

import (
	"strconv"
	"time"
)

// Stack rollups (schemas/opensearch.md, "Stack rollups"): since rollups
// schema 3 a (resolution, window, type, service, host) has one KindStacks
// document holding every stack of the window, packed as a samples document
// is (stack_id sorted, stack_values), its value their sum. Before, it had
// one KindStack document per stack, ~53 bytes on disk each, most of the
// rollups' bytes. Readers sum both kinds with the scripts below; a window
// holding both (rewritten by a rollup of schema 3 after one of schema 2
// wrote it: an upgrade rebuilds the windows behind the committed offset) is
// read from its KindStacks document only, its KindStack documents skipped
// by their window key.

// SetStacks fills a KindStacks document's StackIDs and StackValues from
// parallel ids and values, in any order. IDs must be unique and non-empty,
// values non-negative.
func (d *RollupDoc) SetStacks(ids []string, values []int64) error {
	var err error
	d.StackIDs, d.StackValues, err = packStacks(ids, values)
	return err
}

// Stacks returns a stack rollup's stack IDs and values, of either kind.
func (d *RollupDoc) Stacks() ([]string, []int64, error) {
	return unpackStacks(d.StackIDs, d.StackValues, d.Value)
}

// WindowKey names the series and window of a stack rollup, as
// painlessWindowKey does in a script: what a KindStacks document replaces
// the KindStack documents of.
func WindowKey(resolution string, start time.Time, service, host string) string {
	return strconv.Itoa(len(service)) + ":" + service + strconv.Itoa(len(host)) + ":" + host + resolution + ":" + strconv.FormatInt(start.UnixMilli(), 10)
}

// painlessWindowKey is WindowKey of the script's doc d (lengths in UTF-16
// units there, bytes in Go: the same for the ASCII names hosts and services
// are; a name outside it only makes a window's KindStack documents read
// beside its KindStacks document, never lost).
const painlessWindowKey = `
String windowKey(def d) {
  String s = d['service'].size() == 0 ? '' : d['service'].value;
  String h = d['host'].size() == 0 ? '' : d['host'].value;
  return s.length() + ':' + s + h.length() + ':' + h + d['resolution'].value + ':' + d['@timestamp'].value.toInstant().toEpochMilli();
}
`

// notSkipped holds for every document but a KindStack one whose window key
// is in params.skip.
const notSkipped = `params.skip.size() == 0 || doc['kind'].value != 'stack' || !params.skip.containsKey(windowKey(doc))`

// StackRollupSumsScript is StackSumsScript over stack rollups of both
// kinds, leaving out the KindStack documents of the windows in skip
// (WindowKey; the windows with a KindStacks document, when the selection
// holds both kinds).
func StackRollupSumsScript(skip map[string]bool) map[string]any {
	return stackSumsScript(painlessWindowKey, notSkipped, map[string]any{"skip": skipParam(skip)})
}

// StackRollupsValueScript is StacksValueScript over stack rollups of both
// kinds, leaving out the KindStack documents of the windows in skip.
func StackRollupsValueScript(ids []string, skip map[string]bool) map[string]any {
	return stacksValueScript(ids, painlessWindowKey, notSkipped, map[string]any{"skip": skipParam(skip)})
}

func skipParam(skip map[string]bool) map[string]bool {
	if skip == nil {
		return map[string]bool{}
	}
	return skip
}

// PerStack is a stack rollup as KindStack documents, one per stack with its
// value: what a KindStacks document stands for (a KindStack document is
// itself).
func (d *RollupDoc) PerStack() ([]RollupDoc, error) {
	ids, values, err := d.Stacks()
	if err != nil {
		return nil, err
	}
	out := make([]RollupDoc, len(ids))
	for i, id := range ids {
		out[i] = RollupDoc{Timestamp: d.Timestamp, Resolution: d.Resolution, Kind: KindStack, Type: d.Type,
			Service: d.Service, Host: d.Host, StackIDs: []string{id}, Value: values[i]}
	}
	return out, nil
}
