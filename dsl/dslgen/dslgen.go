package dslgen

import (
	"fmt"
	"strings"
)

// Workflow returns a valid workflow with n steps (n >= 1) cycling through
// http, switch, shell, set, llm and foreach steps; the last step succeeds.
func Workflow(n int) []byte {
	var sb strings.Builder
	sb.WriteString("# yaml-language-server: $schema=../schemas/workflow.schema.json\n")
	fmt.Fprintf(&sb, "tqw: v1\nname: generated-%d\n", n)
	sb.WriteString("input: {type: object, properties: {base: {type: string}}}\n")
	sb.WriteString("secrets: [TOKEN, OPENAI_API_KEY]\n")
	sb.WriteString("defaults: {timeout: 30s, retry: {max_attempts: 3, initial: 1s}}\n")
	sb.WriteString("vars: {counter: 0}\n")
	sb.WriteString("steps:\n")
	for i := 0; i < n-1; i++ {
		id := fmt.Sprintf("s%d", i)
		prev := fmt.Sprintf("s%d", max(i-1, 0))
		next := fmt.Sprintf("s%d", i+1)
		switch i % 6 {
		case 0:
			fmt.Fprintf(&sb, `  - id: %s
    description: fetch item %d
    action: http
    with:
      method: POST
      url: "${ input.base }/items/%d/${ vars.counter }"
      headers: {Authorization: "Bearer ${ secrets.TOKEN }", X-Step: "%d"}
      body: {n: %d, prev: "${ vars.counter * %d }"}
      expect_status: [200, 201]
    retry: {max_attempts: 4, on: [http.status_5xx, timeout]}
    timeout: 10s
    set: {v%d: "${ output.body.id ?? %d }"}
`, id, i, i, i, i, i+1, i, i)
		case 1:
			fmt.Fprintf(&sb, `  - id: %s
    switch:
      - when: steps.%s.output.status == 200 && vars.counter > %d
        next: %s
      - when: len(vars) > %d
        next: %s
    next: %s
`, id, prev, i, next, i%7, next, next)
		case 2:
			fmt.Fprintf(&sb, `  - id: %s
    action: shell
    with:
      command: ["printf", "%%s\n", "${ string(steps.%s.output.status) }-%d"]
      env: {STEP: "%d"}
      timeout: 5s
    catch:
      - on: [shell.exit]
        when: error.message != "x%d"
        next: %s
`, id, fmt.Sprintf("s%d", i-2), i, i, i, next)
		case 3:
			fmt.Fprintf(&sb, `  - id: %s
    set: {counter: "${ vars.counter + %d }", label: "step %d of ${ run.workflow }"}
`, id, i, i)
		case 4:
			fmt.Fprintf(&sb, `  - id: %s
    action: llm
    with:
      model: gpt-4o-mini
      system: You summarize step %d.
      prompt: "Summarize ${ toJSON(steps.%s.output) } for step %d"
      temperature: 0.2
`, id, i, fmt.Sprintf("s%d", i-4), i)
		case 5:
			fmt.Fprintf(&sb, `  - id: %s
    foreach:
      items: "${ steps.%s.output.text | split(',') }"
      concurrency: 2
      action: shell
      with: {command: ["echo", "${ string(index + %d) }"]}
`, id, fmt.Sprintf("s%d", i-1), i)
		}
	}
	fmt.Fprintf(&sb, "  - id: s%d\n    succeed: \"${ vars.counter + %d }\"\n", n-1, n)
	return []byte(sb.String())
}
