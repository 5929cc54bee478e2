package indices

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Since rollups schema 4 the rollups' _source leaves out a stack rollup's
// stacks (schemas/opensearch.md, "Stack rollups without their stacks in
// _source"): they were stored twice, as the doc values every query reads
// and again in _source, about 0.42 bytes per raw sample of a fleet. Whatever
// needs a stack rollup whole (stackctl reindex's copy, tests comparing the
// documents stored) asks a search for StackFields as docvalue_fields and
// puts them back with WithStackDocValues. Documents of indices created
// before keep their stacks in _source as well; their doc values are the
// same, so they are read the same way.

// StackFields are the fields the rollups' _source leaves out, to be asked
// for as docvalue_fields.
var StackFields = []string{"stack_id", "stack_values"}

// StackDocValues are a search hit's "fields" when the search asked for
// StackFields as docvalue_fields: stack_id as the keyword's doc values give
// it (sorted and unique, the order it was written in), stack_values as the
// node formats a binary doc value (base64, without padding).
type StackDocValues struct {
	StackIDs    []string `json:"stack_id"`
	StackValues []string `json:"stack_values"`
}

// ErrStackDocValues is wrapped by every error of WithStackDocValues.
var ErrStackDocValues = errors.New("bad stack doc values")

// WithStackDocValues is a rollup document's _source with its stacks put
// back from its doc values f: _source as stored, every other field as it
// is, and stack_id and stack_values (the JSON a RollupDoc writes) from f. A
// document without stacks (f empty) is returned as it is.
func WithStackDocValues(source json.RawMessage, f StackDocValues) (json.RawMessage, error) {
	if len(f.StackIDs) == 0 && len(f.StackValues) == 0 {
		return source, nil
	}
	if len(f.StackValues) > 1 {
		return nil, fmt.Errorf("%w: %d stack_values, want at most one", ErrStackDocValues, len(f.StackValues))
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(source, &doc); err != nil || doc == nil {
		return nil, fmt.Errorf("%w: _source is not a JSON object: %v", ErrStackDocValues, err)
	}
	var err error
	if doc["stack_id"], err = json.Marshal(f.StackIDs); err != nil {
		return nil, err
	}
	delete(doc, "stack_values")
	if len(f.StackValues) == 1 {
		packed, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(f.StackValues[0], "="))
		if err != nil {
			return nil, fmt.Errorf("%w: stack_values: %v", ErrStackDocValues, err)
		}
		if doc["stack_values"], err = json.Marshal(packed); err != nil {
			return nil, err
		}
	}
	return json.Marshal(doc)
}
