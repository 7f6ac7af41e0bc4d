package schemas

import (
	"encoding/json"
	"testing"
)

func TestWorkflowSchemaIsJSON(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(WorkflowJSON, &doc); err != nil {
		t.Fatalf("workflow.schema.json: %v", err)
	}
	if doc["$id"] != WorkflowID {
		t.Errorf("$id = %v; want %s", doc["$id"], WorkflowID)
	}
	if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v; want draft 2020-12", doc["$schema"])
	}
}
