package lsp

import "encoding/json"

// The Language Server Protocol 3.17 structures this server reads and
// writes, with the spec's names; fields it never uses are left out.

// Position is a zero-based line and a character offset in the encoding
// negotiated at initialize (UTF-16 code units unless the client offers
// utf-32 or utf-8).
type Position struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

// Range is [Start, End).
type Range struct {
	Start Position `json:"start"`
	End   Position `json:"end"`
}

// Location is a range in a document.
type Location struct {
	URI   string `json:"uri"`
	Range Range  `json:"range"`
}

type textDocumentIdentifier struct {
	URI string `json:"uri"`
}

type textDocumentItem struct {
	URI        string `json:"uri"`
	LanguageID string `json:"languageId"`
	Version    int    `json:"version"`
	Text       string `json:"text"`
}

type didOpenParams struct {
	TextDocument textDocumentItem `json:"textDocument"`
}

type didChangeParams struct {
	TextDocument struct {
		URI     string `json:"uri"`
		Version int    `json:"version"`
	} `json:"textDocument"`
	ContentChanges []struct {
		Range *Range `json:"range,omitempty"`
		Text  string `json:"text"`
	} `json:"contentChanges"`
}

type didCloseParams struct {
	TextDocument textDocumentIdentifier `json:"textDocument"`
}

type textDocumentPositionParams struct {
	TextDocument textDocumentIdentifier `json:"textDocument"`
	Position     Position               `json:"position"`
}

type referenceParams struct {
	textDocumentPositionParams
	Context struct {
		IncludeDeclaration bool `json:"includeDeclaration"`
	} `json:"context"`
}

type renameParams struct {
	textDocumentPositionParams
	NewName string `json:"newName"`
}

type codeActionParams struct {
	TextDocument textDocumentIdentifier `json:"textDocument"`
	Range        Range                  `json:"range"`
}

type initializeParams struct {
	Capabilities struct {
		General struct {
			PositionEncodings []string `json:"positionEncodings"`
		} `json:"general"`
	} `json:"capabilities"`
}

type initializeResult struct {
	Capabilities serverCapabilities `json:"capabilities"`
	ServerInfo   struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	} `json:"serverInfo"`
}

type serverCapabilities struct {
	PositionEncoding       string            `json:"positionEncoding"`
	TextDocumentSync       int               `json:"textDocumentSync"`
	CompletionProvider     completionOptions `json:"completionProvider"`
	HoverProvider          bool              `json:"hoverProvider"`
	DefinitionProvider     bool              `json:"definitionProvider"`
	ReferencesProvider     bool              `json:"referencesProvider"`
	RenameProvider         renameOptions     `json:"renameProvider"`
	DocumentSymbolProvider bool              `json:"documentSymbolProvider"`
	CodeActionProvider     codeActionOptions `json:"codeActionProvider"`
}

type completionOptions struct {
	TriggerCharacters []string `json:"triggerCharacters"`
}

type renameOptions struct {
	PrepareProvider bool `json:"prepareProvider"`
}

type codeActionOptions struct {
	CodeActionKinds []string `json:"codeActionKinds"`
}

// Diagnostic severities.
const (
	severityError   = 1
	severityWarning = 2
)

// Diagnostic is an LSP diagnostic.
type Diagnostic struct {
	Range              Range                  `json:"range"`
	Severity           int                    `json:"severity"`
	Code               string                 `json:"code"`
	CodeDescription    *codeDescription       `json:"codeDescription,omitempty"`
	Source             string                 `json:"source"`
	Message            string                 `json:"message"`
	RelatedInformation []relatedInformation   `json:"relatedInformation,omitempty"`
	Data               map[string]interface{} `json:"data,omitempty"`
}

type codeDescription struct {
	Href string `json:"href"`
}

type relatedInformation struct {
	Location Location `json:"location"`
	Message  string   `json:"message"`
}

type publishDiagnosticsParams struct {
	URI         string       `json:"uri"`
	Version     *int         `json:"version,omitempty"`
	Diagnostics []Diagnostic `json:"diagnostics"`
}

// Completion item kinds and insert formats used here.
const (
	completionKindField    = 5
	completionKindVariable = 6
	completionKindFunction = 3
	completionKindModule   = 9
	completionKindValue    = 12
	completionKindEnum     = 20
	completionKindRef      = 18
	markupMarkdown         = "markdown"
)

type completionItem struct {
	Label         string         `json:"label"`
	Kind          int            `json:"kind,omitempty"`
	Detail        string         `json:"detail,omitempty"`
	Documentation *markupContent `json:"documentation,omitempty"`
	SortText      string         `json:"sortText,omitempty"`
}

type completionList struct {
	IsIncomplete bool             `json:"isIncomplete"`
	Items        []completionItem `json:"items"`
}

type markupContent struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

type hover struct {
	Contents markupContent `json:"contents"`
	Range    *Range        `json:"range,omitempty"`
}

type textEdit struct {
	Range   Range  `json:"range"`
	NewText string `json:"newText"`
}

type workspaceEdit struct {
	Changes map[string][]textEdit `json:"changes"`
}

type codeAction struct {
	Title       string         `json:"title"`
	Kind        string         `json:"kind"`
	Diagnostics []Diagnostic   `json:"diagnostics,omitempty"`
	IsPreferred bool           `json:"isPreferred,omitempty"`
	Edit        *workspaceEdit `json:"edit"`
}

// Symbol kinds used for steps: actions and calls are functions, waits
// events, routing steps operators, the ends of a run keys.
const (
	symbolKindFunction  = 12
	symbolKindEvent     = 24
	symbolKindOperator  = 25
	symbolKindKey       = 20
	symbolKindNamespace = 3
)

type documentSymbol struct {
	Name           string `json:"name"`
	Detail         string `json:"detail,omitempty"`
	Kind           int    `json:"kind"`
	Range          Range  `json:"range"`
	SelectionRange Range  `json:"selectionRange"`
	// Children are the steps of a parallel step's branches, a map's
	// steps, or those of on_error and finally.
	Children []documentSymbol `json:"children,omitempty"`
}

func decodeParams(raw *json.RawMessage, v any) error {
	if raw == nil {
		return nil
	}
	return json.Unmarshal(*raw, v)
}
