/*
 * shout: a zot extension in plain C, no SDK.
 *
 * It proves that any language with WASI support can speak the protocol:
 * built with clang for wasm32-wasip1 it runs in zotbox's sandbox as a core
 * module; built with any C compiler it is an ordinary native extension.
 *
 *   /shout TEXT      answers `display` with TEXT in capitals
 *   tool `shout`     {"text": "..."} -> the text in capitals
 *
 * The JSON handling is deliberately tiny: it finds string fields by name and
 * copies them out with escapes preserved, which is all this extension needs.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE (1 << 20)

static void emit(const char *frame) {
    fputs(frame, stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

/*
 * Copies the JSON string value of "key" (escapes kept verbatim) into out,
 * cut short rather than inside an escape: half of `\u00e9` is no JSON.
 */
static int field(const char *json, const char *key, char *out, size_t cap) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\"", key);
    const char *at = strstr(json, pattern);
    if (!at) return 0;
    at += strlen(pattern);
    while (*at == ' ' || *at == ':') at++;
    if (*at != '"') return 0;
    at++;
    size_t n = 0;
    while (*at && *at != '"') {
        size_t need = *at != '\\' ? 1 : at[1] == 'u' ? 6 : 2;
        if (n + need >= cap) break;
        for (size_t i = 0; i < need && *at; i++) out[n++] = *at++;
    }
    out[n] = '\0';
    return 1;
}

/* Upper-cases ASCII letters, leaving escape sequences intact (and never
 * stepping past the end of a text that ends inside one). */
static void shout(char *text) {
    for (char *p = text; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            if (*p == 'u') for (int i = 0; i < 4 && p[1]; i++) p++;
            continue;
        }
        *p = (char)toupper((unsigned char)*p);
    }
}

int main(void) {
    static char type[64], id[128], name[128], text[MAX_LINE / 2], out[MAX_LINE];
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    emit("{\"type\":\"hello\",\"name\":\"c-shout\",\"version\":\"1.0.0\",\"capabilities\":[\"commands\",\"tools\"]}");
    emit("{\"type\":\"register_command\",\"name\":\"shout\",\"description\":\"repeat the arguments in capitals\"}");
    emit("{\"type\":\"register_tool\",\"name\":\"shout\",\"description\":\"Return the text in capitals.\","
         "\"schema\":{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},\"required\":[\"text\"]}}");
    emit("{\"type\":\"ready\"}");
    /* Whole lines: a line cut at a buffer's size would leave its rest to be
     * read as a frame of its own, whose keys the caller wrote. */
    while ((len = getline(&line, &line_cap, stdin)) != -1) {
        if (len > MAX_LINE) {
            fprintf(stderr, "c-shout: skipping a line over %d bytes\n", MAX_LINE);
            continue;
        }
        if (!field(line, "type", type, sizeof type)) {
            fprintf(stderr, "c-shout: skipping a line without a type\n");
            continue;
        }
        if (strcmp(type, "shutdown") == 0) {
            emit("{\"type\":\"shutdown_ack\"}");
            free(line);
            return 0;
        }
        if (!field(line, "id", id, sizeof id)) continue;
        field(line, "name", name, sizeof name);
        if (strcmp(type, "command_invoked") == 0) {
            if (!field(line, "args", text, sizeof text)) text[0] = '\0';
            shout(text);
            snprintf(out, sizeof out,
                     "{\"type\":\"command_response\",\"id\":\"%s\",\"action\":\"display\",\"display\":\"%s\"}", id, text);
            emit(out);
        } else if (strcmp(type, "tool_call") == 0) {
            if (!field(line, "text", text, sizeof text)) {
                snprintf(out, sizeof out,
                         "{\"type\":\"tool_result\",\"id\":\"%s\",\"is_error\":true,"
                         "\"content\":[{\"type\":\"text\",\"text\":\"missing `text`\"}]}", id);
            } else {
                shout(text);
                snprintf(out, sizeof out,
                         "{\"type\":\"tool_result\",\"id\":\"%s\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", id, text);
            }
            emit(out);
        }
    }
    free(line);
    return 0;
}
