// go-notes: a zot extension in Go, standard library only.
//
// It speaks the protocol directly (newline-delimited JSON on stdin and
// stdout) and shows each thing an extension does: a slash command
// (/go-note), a tool with arguments (go_weather), a tool_call intercept
// (refusing `rm -rf /`), a notify, and one goroutine per call.
//
// Sandboxed build (what `zotbox ext build` runs):
//
//	GOOS=wasip1 GOARCH=wasm go build -o go-notes.wasm .
//
// Native build: `go build -o go-notes .`
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// frame is any frame; only the fields this extension reads are named.
type frame struct {
	Type     string          `json:"type"`
	ID       string          `json:"id,omitempty"`
	Name     string          `json:"name,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Event    string          `json:"event,omitempty"`
	ToolName string          `json:"tool_name,omitempty"`
	ToolArgs json.RawMessage `json:"tool_args,omitempty"`
}

// out writes whole frames, one line each; handlers run concurrently.
var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func send(v any) {
	out.Lock()
	defer out.Unlock()
	if err := out.enc.Encode(v); err != nil {
		fmt.Fprintf(os.Stderr, "go-notes: cannot write a frame: %v\n", err)
	}
}

func notify(level, message string) {
	send(map[string]any{"type": "notify", "level": level, "message": message})
}

func text(id, s string, isError bool) map[string]any {
	result := map[string]any{
		"type":    "tool_result",
		"id":      id,
		"content": []map[string]string{{"type": "text", "text": s}},
	}
	if isError {
		result["is_error"] = true
	}
	return result
}

var notes = struct {
	sync.Mutex
	items []string
}{}

// gatherings holds the callers of `go_gather` waiting for their group to fill.
var gatherings = struct {
	sync.Mutex
	groups map[string]*group
}{groups: map[string]*group{}}

type group struct {
	arrived int
	full    chan struct{}
}

func main() {
	send(map[string]any{
		"type": "hello", "name": "go-notes", "version": "1.0.0",
		"capabilities": []string{"commands", "tools", "events"},
	})
	send(map[string]any{
		"type": "register_command", "name": "go-note",
		"description": "note something down (Go)",
	})
	send(map[string]any{
		"type": "register_tool", "name": "go_weather",
		"description": "Get the (fake) current weather for a city.",
		"schema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"city":  map[string]string{"type": "string"},
				"units": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
			},
			"required": []string{"city"},
		},
	})
	send(map[string]any{
		"type": "register_tool", "name": "go_read_file",
		"description": "Read a file (the sandbox decides whether it may).",
		"schema": map[string]any{
			"type":       "object",
			"properties": map[string]any{"path": map[string]string{"type": "string"}},
			"required":   []string{"path"},
		},
	})
	send(map[string]any{
		"type": "register_tool", "name": "go_gather",
		"description": "Answer once `n` calls of the same group are waiting at once.",
		"schema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"group": map[string]string{"type": "string"},
				"n":     map[string]string{"type": "integer"},
			},
			"required": []string{"group", "n"},
		},
	})
	send(map[string]any{"type": "subscribe", "intercept": []string{"tool_call"}})
	send(map[string]any{"type": "ready"})

	in := bufio.NewReaderSize(os.Stdin, 64*1024)
	// The calls still running: answered before the extension ends, so a
	// check that came just before `shutdown` or the end of input is not
	// left unanswered (zot allows a call whose check goes unanswered).
	var running sync.WaitGroup
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var f frame
			if jerr := json.Unmarshal(line, &f); jerr != nil {
				fmt.Fprintf(os.Stderr, "go-notes: not a frame: %v\n", jerr)
			} else if f.Type == "shutdown" {
				running.Wait()
				send(map[string]string{"type": "shutdown_ack"})
				return
			} else {
				// One goroutine per call: a slow handler never holds up the next frame.
				running.Add(1)
				go func() {
					defer running.Done()
					handle(f)
				}()
			}
		}
		if err == io.EOF {
			running.Wait()
			return
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "go-notes: cannot read stdin: %v\n", err)
			os.Exit(1)
		}
	}
}

func handle(f frame) {
	switch f.Type {
	case "command_invoked":
		command(f)
	case "tool_call":
		tool(f)
	case "event_intercept":
		intercept(f)
	}
}

func command(f frame) {
	var args string
	_ = json.Unmarshal(f.Args, &args)
	args = strings.TrimSpace(args)
	if f.Name != "go-note" {
		send(map[string]any{"type": "command_response", "id": f.ID, "error": "unknown command `" + f.Name + "`"})
		return
	}
	if args == "" {
		send(map[string]any{"type": "command_response", "id": f.ID, "error": "nothing to note: `/go-note TEXT`"})
		return
	}
	notes.Lock()
	notes.items = append(notes.items, args)
	count := len(notes.items)
	notes.Unlock()
	notify("success", fmt.Sprintf("noted (%d in total)", count))
	send(map[string]any{"type": "command_response", "id": f.ID, "action": "display", "display": "noted: " + args})
}

func tool(f frame) {
	switch f.Name {
	case "go_weather":
		var args struct {
			City  *string `json:"city"`
			Units string  `json:"units"`
		}
		if err := json.Unmarshal(f.Args, &args); err != nil {
			send(text(f.ID, "invalid arguments for tool `go_weather`: "+err.Error(), true))
			return
		}
		if args.City == nil {
			send(text(f.ID, "invalid arguments for tool `go_weather`: missing field `city`", true))
			return
		}
		notify("info", "looking up the weather in "+*args.City)
		switch args.Units {
		case "", "celsius":
			send(text(f.ID, *args.City+": 1°C, light fog (fake)", false))
		case "fahrenheit":
			send(text(f.ID, *args.City+": 33°F, light fog (fake)", false))
		default:
			send(text(f.ID, "unknown units `"+args.Units+"`; use celsius or fahrenheit", true))
		}
	case "go_read_file":
		var args struct {
			Path string `json:"path"`
		}
		_ = json.Unmarshal(f.Args, &args)
		data, err := os.ReadFile(args.Path)
		if err != nil {
			send(text(f.ID, "cannot read: "+err.Error(), true))
			return
		}
		send(text(f.ID, fmt.Sprintf("read %d bytes", len(data)), false))
	case "go_gather":
		var args struct {
			Group string `json:"group"`
			N     int    `json:"n"`
		}
		_ = json.Unmarshal(f.Args, &args)
		gatherings.Lock()
		g := gatherings.groups[args.Group]
		if g == nil {
			g = &group{full: make(chan struct{})}
			gatherings.groups[args.Group] = g
		}
		g.arrived++
		if g.arrived == args.N {
			close(g.full)
		}
		gatherings.Unlock()
		// Waits for the other calls: only possible while stdin is read by
		// a goroutine that does not block the whole program.
		<-g.full
		send(text(f.ID, fmt.Sprintf("%d gathered", args.N), false))
	default:
		send(text(f.ID, "unknown tool `"+f.Name+"`", true))
	}
}

func intercept(f frame) {
	answer := map[string]any{"type": "event_intercept_response", "id": f.ID, "block": false}
	if f.Event == "tool_call" && f.ToolName == "bash" {
		var args struct {
			Command string `json:"command"`
		}
		_ = json.Unmarshal(f.ToolArgs, &args)
		if strings.Contains(args.Command, "rm -rf /") {
			answer["block"] = true
			answer["reason"] = "refused by go-notes: `rm -rf /` deletes the whole filesystem"
		}
	}
	send(answer)
}
