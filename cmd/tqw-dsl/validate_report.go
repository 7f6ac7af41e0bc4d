package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/tqw-dsl/tqw/dsl"
)

// reportVersion is the version of validate's JSON report
// (schemas/validate-report.schema.json); it changes only when a field
// changes meaning or goes away.
const reportVersion = 1

// columnUnit names the unit of the columns in the JSON report.
const columnUnit = "unicode-code-points"

func writeText(out io.Writer, files []checkedFile) error {
	for _, f := range files {
		if _, err := fmt.Fprint(out, f.diags.String()); err != nil {
			return err
		}
		switch {
		case f.w != nil:
			if _, err := fmt.Fprintf(out, "%s: valid (%s, %s)\n", f.name, plural(len(f.w.Steps), "step"), plural(len(f.diags), "warning")); err != nil {
				return err
			}
		case f.cases != nil:
			if _, err := fmt.Fprintf(out, "%s: valid test file (%s, %s)\n", f.name, plural(*f.cases, "case"), plural(len(f.diags), "warning")); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonReport is the --format json document.
type jsonReport struct {
	Version int          `json:"version"`
	Columns string       `json:"columns"`
	Valid   bool         `json:"valid"`
	Files   []fileReport `json:"files"`
}

// fileReport is one file's result in the JSON report.
type fileReport struct {
	File        string          `json:"file"`
	Valid       bool            `json:"valid"`
	Hash        string          `json:"hash,omitempty"`
	Diagnostics dsl.Diagnostics `json:"diagnostics"`
}

func writeJSON(out io.Writer, files []checkedFile) error {
	rep := jsonReport{Version: reportVersion, Columns: columnUnit, Valid: true, Files: []fileReport{}}
	for _, f := range files {
		r := fileReport{File: f.name, Valid: f.valid(), Diagnostics: f.diags}
		if f.w != nil {
			r.Hash = f.w.Hash
		}
		rep.Valid = rep.Valid && r.Valid
		rep.Files = append(rep.Files, r)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// writeGitHub prints one GitHub Actions workflow command per diagnostic
// (::error or ::warning with file, line, col, endLine, endColumn and
// title), escaped as the runner expects.
func writeGitHub(out io.Writer, files []checkedFile) error {
	for _, f := range files {
		for _, d := range f.diags {
			cmd := "error"
			if d.Severity == dsl.SeverityWarning {
				cmd = "warning"
			}
			msg := d.Message
			if d.Hint != "" {
				msg += "\nhint: " + d.Hint
			}
			props := []string{
				"file=" + ghProperty(d.File),
				fmt.Sprintf("line=%d", d.Line), fmt.Sprintf("col=%d", d.Col),
				fmt.Sprintf("endLine=%d", d.EndLine), fmt.Sprintf("endColumn=%d", d.EndCol),
				"title=" + ghProperty("tqw "+d.Code),
			}
			if _, err := fmt.Fprintf(out, "::%s %s::%s\n", cmd, strings.Join(props, ","), ghData(msg)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ghData escapes a workflow command's message.
func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

// ghProperty escapes a workflow command's property value.
func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// SARIF 2.1.0, the subset validate writes.
type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool       sarifTool     `json:"tool"`
	ColumnKind string        `json:"columnKind"`
	Results    []sarifResult `json:"results"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	InformationURI string      `json:"informationUri"`
	Rules          []sarifRule `json:"rules"`
}

type sarifRule struct {
	ID string `json:"id"`
}

type sarifResult struct {
	RuleID    string          `json:"ruleId"`
	RuleIndex int             `json:"ruleIndex"`
	Level     string          `json:"level"`
	Message   sarifMessage    `json:"message"`
	Locations []sarifLocation `json:"locations"`
}

type sarifMessage struct {
	Text string `json:"text"`
}

type sarifLocation struct {
	PhysicalLocation sarifPhysical `json:"physicalLocation"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifact `json:"artifactLocation"`
	Region           sarifRegion   `json:"region"`
}

type sarifArtifact struct {
	URI string `json:"uri"`
}

type sarifRegion struct {
	StartLine   int `json:"startLine"`
	StartColumn int `json:"startColumn"`
	EndLine     int `json:"endLine"`
	EndColumn   int `json:"endColumn"`
}

// docsURL is where the language and its diagnostic codes are documented.
const docsURL = "https://github.com/tqw-dsl/tqw/blob/main/docs/DSL.md"

func writeSARIF(out io.Writer, files []checkedFile) error {
	run := sarifRun{
		Tool:       sarifTool{Driver: sarifDriver{Name: "tqw-dsl", InformationURI: docsURL, Rules: []sarifRule{}}},
		ColumnKind: "unicodeCodePoints",
		Results:    []sarifResult{},
	}
	ruleIndex := map[string]int{}
	for _, f := range files {
		for _, d := range f.diags {
			i, ok := ruleIndex[d.Code]
			if !ok {
				i = len(run.Tool.Driver.Rules)
				ruleIndex[d.Code] = i
				run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule{ID: d.Code})
			}
			level := "error"
			if d.Severity == dsl.SeverityWarning {
				level = "warning"
			}
			text := d.Message
			if d.Hint != "" {
				text += " (hint: " + d.Hint + ")"
			}
			run.Results = append(run.Results, sarifResult{
				RuleID: d.Code, RuleIndex: i, Level: level, Message: sarifMessage{Text: text},
				Locations: []sarifLocation{{PhysicalLocation: sarifPhysical{
					ArtifactLocation: sarifArtifact{URI: fileURI(d.File)},
					Region:           sarifRegion{StartLine: d.Line, StartColumn: d.Col, EndLine: d.EndLine, EndColumn: d.EndCol},
				}}},
			})
		}
	}
	log := sarifLog{Schema: "https://json.schemastore.org/sarif-2.1.0.json", Version: "2.1.0", Runs: []sarifRun{run}}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(log)
}

// fileURI renders a path as a URI reference: relative paths stay
// relative (slash-separated, escaped), absolute ones become file URIs.
func fileURI(p string) string {
	u := url.URL{Path: filepath.ToSlash(p)}
	if filepath.IsAbs(p) {
		u.Scheme = "file"
	}
	return u.String()
}

// reviewdog Diagnostic Format (rdjson), the subset validate writes.
type rdResult struct {
	Source      rdSource       `json:"source"`
	Diagnostics []rdDiagnostic `json:"diagnostics"`
}

type rdSource struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

type rdDiagnostic struct {
	Message  string     `json:"message"`
	Location rdLocation `json:"location"`
	Severity string     `json:"severity"`
	Code     rdCode     `json:"code"`
}

type rdLocation struct {
	Path  string  `json:"path"`
	Range rdRange `json:"range"`
}

type rdRange struct {
	Start rdPosition `json:"start"`
	End   rdPosition `json:"end"`
}

type rdPosition struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

type rdCode struct {
	Value string `json:"value"`
	URL   string `json:"url"`
}

func writeRDJSON(out io.Writer, files []checkedFile) error {
	res := rdResult{Source: rdSource{Name: "tqw-dsl", URL: docsURL}, Diagnostics: []rdDiagnostic{}}
	for _, f := range files {
		lines := strings.Split(string(f.src), "\n")
		byteCol := func(line, col int) int {
			if line < 1 || line > len(lines) {
				return col
			}
			return utf8Column(lines[line-1], col)
		}
		for _, d := range f.diags {
			sev := "ERROR"
			if d.Severity == dsl.SeverityWarning {
				sev = "WARNING"
			}
			msg := d.Message
			if d.Hint != "" {
				msg += "\nhint: " + d.Hint
			}
			res.Diagnostics = append(res.Diagnostics, rdDiagnostic{
				Message: msg, Severity: sev, Code: rdCode{Value: d.Code, URL: docsURL},
				Location: rdLocation{Path: d.File, Range: rdRange{
					Start: rdPosition{Line: d.Line, Column: byteCol(d.Line, d.Col)},
					End:   rdPosition{Line: d.EndLine, Column: byteCol(d.EndLine, d.EndCol)},
				}},
			})
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// utf8Column converts a 1-based code point column of line to the 1-based
// UTF-8 byte column rdjson uses; columns past the line's end keep their
// distance from it.
func utf8Column(line string, col int) int {
	off, c := 0, 1
	for c < col && off < len(line) {
		_, w := utf8.DecodeRuneInString(line[off:])
		off += w
		c++
	}
	return off + 1 + (col - c)
}
