// Package config loads a service's settings from STACKSTREAM_* environment
// variables (and a .env file), prints them with -h, and turns bad values into
// one clear line naming the variable.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/joho/godotenv"
	"github.com/kelseyhightower/envconfig"

	"github.com/stackstream/stackstream/pkg/version"
)

// Prefix of every variable.
const Prefix = "STACKSTREAM"

// ErrHelp is returned when -h was asked for and usage has been printed.
var ErrHelp = errors.New("help requested")

// Validator is implemented by configs with checks beyond parsing.
type Validator interface {
	Validate() error
}

// Load fills spec (a pointer to a struct with envconfig tags) and validates
// it. Variables already in the environment win over the .env file in the
// working directory. With -h or --help in args it prints every variable with
// its default to out and returns ErrHelp.
func Load(spec any, args []string, out io.Writer) error {
	return LoadWithFlags(spec, args, out, nil)
}

// LoadWithFlags is Load for a command that also takes flags. flags (nil for
// none) returns a flag set bound to spec's fields, whose defaults are the
// values the fields hold when it is called: it is called after the
// environment was read, so a flag overrides its variable. spec is validated
// once, after both, so a bad variable that a valid flag replaces does not
// stop start-up; nor does one that does not even parse, when a flag whose
// usage names the variable (as every flag's does) is given.
func LoadWithFlags(spec any, args []string, out io.Writer, flags func() *flag.FlagSet) error {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			if err := Usage(spec, out); err != nil {
				return err
			}
			if flags != nil {
				fmt.Fprintln(out, "\nFlags (override the variables):")
				fs := flags()
				fs.SetOutput(out)
				fs.PrintDefaults()
			}
			return ErrHelp
		}
	}
	if err := loadDotEnv(".env"); err != nil {
		return err
	}
	// A variable that does not parse is set aside while the others load:
	// a flag may replace it.
	var unparsed []*envconfig.ParseError
	for {
		err := envconfig.Process(Prefix, spec)
		if err == nil {
			break
		}
		var perr *envconfig.ParseError
		if !errors.As(err, &perr) {
			return fmt.Errorf("config: %w", err)
		}
		if flags == nil || len(unparsed) == 64 {
			return parseErr(perr)
		}
		unparsed = append(unparsed, perr)
		v := os.Getenv(perr.KeyName)
		os.Unsetenv(perr.KeyName)
		defer os.Setenv(perr.KeyName, v)
	}
	if flags != nil {
		fs := flags()
		if err := fs.Parse(args); err != nil {
			return err
		}
		for _, perr := range unparsed {
			if !replacedByFlag(fs, perr.KeyName) {
				return parseErr(perr)
			}
		}
	}
	if v, ok := spec.(Validator); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	return nil
}

func parseErr(perr *envconfig.ParseError) error {
	return fmt.Errorf("config: %s=%q is not a valid %s: %v", perr.KeyName, perr.Value, perr.TypeName, perr.Err)
}

// replacedByFlag reports whether a flag given on the command line stands for
// the variable key: a flag's usage names the variable it overrides.
func replacedByFlag(fs *flag.FlagSet, key string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		for _, w := range strings.FieldsFunc(f.Usage, func(r rune) bool { return r == ' ' || r == '(' || r == ')' || r == ',' }) {
			if w == key {
				found = true
			}
		}
	})
	return found
}

// ValidateAll returns the first error of the blocks' checks, in order: a
// service's Validate checks the shared blocks it embeds with it.
func ValidateAll(blocks ...Validator) error {
	for _, b := range blocks {
		if err := b.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// loadDotEnv sets the variables of path that are not already set.
func loadDotEnv(path string) error {
	vars, err := godotenv.Read(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("config: read %s: %w", path, err)
	}
	for k, v := range vars {
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, v)
		}
	}
	return nil
}

// Usage prints a table of the variables of spec.
func Usage(spec any, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, version.Line())
	fmt.Fprintln(tw, "\nEnvironment variables (also read from ./.env):")
	fmt.Fprintln(tw, "VARIABLE\tTYPE\tDEFAULT\tREQUIRED\tDESCRIPTION")
	format := "{{range .}}{{usage_key .}}\t{{usage_type .}}\t{{usage_default .}}\t{{usage_required .}}\t{{usage_description .}}\n{{end}}"
	if err := envconfig.Usagef(Prefix, spec, tw, format); err != nil {
		return fmt.Errorf("config usage: %w", err)
	}
	return tw.Flush()
}

// Exit ends a command after its run returned err: quietly for nil or ErrHelp
// (usage was printed), else with one line "command: err" on stderr and
// status 1, the clear start-up error every binary promises.
func Exit(command string, err error) {
	if err == nil || errors.Is(err, ErrHelp) {
		return
	}
	fmt.Fprintln(os.Stderr, command+":", err)
	os.Exit(1)
}
