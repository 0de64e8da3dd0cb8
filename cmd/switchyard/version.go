package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// buildVersion is what this binary knows of its own build: the module
// version (a tag, a pseudo-version, or "(devel)" for a build of a
// checkout without VCS stamping) and the VCS revision when the build
// recorded one.
type buildVersion struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

func readVersion() buildVersion {
	v := buildVersion{Version: "(devel)", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v buildVersion) String() string {
	s := "switchyard " + v.Version
	if v.Revision != "" {
		s += " (revision " + v.Revision
		if v.Time != "" {
			s += " of " + v.Time
		}
		if v.Modified {
			s += ", with uncommitted changes"
		}
		s += ")"
	}
	return s + " " + v.Go
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs, _ := newFlags("version", "version [--json]", "Prints the version of this build, and its VCS revision when the build recorded one.", stdout)
	// Every verb has --config; version reads none, so its help leaves it
	// out. Given, it is ignored: a wrapper that passes it to every verb
	// still gets the version.
	fs.Lookup("config").Usage = ""
	asJSON := jsonFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	v := readVersion()
	if *asJSON {
		return printJSON(stdout, v)
	}
	_, err := fmt.Fprintln(stdout, v)
	return err
}
