/*
 * apply.h - `gpuorch apply -f FILE`: the cluster's configuration from a
 * YAML or JSON document, as kubectl apply does it.
 *
 * The document is one object with any of these lists, applied in this
 * order so that what an object refers to exists first:
 *
 *   pools:            [{name, description, aliases, node_features, mig}]
 *   priority_classes: [{name, order, may_preempt, description}]
 *   teams:            [{name, weight, borrow_limit, quotas: [{pool, gpu_type,
 *                       guaranteed, borrow_limit}]}]
 *   users:            [{name, unix_user, team, role}]
 *   prices:           [{name (a GPU type), per_gpu_hour, description}]
 *   services:         [{name, team, command, resources, min, max, ...}]
 *                     (server-set "generation", "user", "status" ignored)
 *
 * (the fields are those of the API's PUT bodies, docs/api.md). For each
 * object: GET it; absent, PUT it ("created"); present and already holding
 * every field the file gives (apply_subset, after the API's defaults),
 * "unchanged"; else PUT the file's fields merged onto what the server holds
 * (apply_merge), "configured". So a field the file leaves out keeps its
 * value, a list the file gives replaces the server's (a quota the file
 * leaves out goes), a field set to null is removed (back to the API's
 * default), and a second run changes nothing. A pool's "mig" (docs/mig.md)
 * is one setting: a layout or "off" replaces the server's whole (a count
 * of a layout the file leaves out goes, and "off" is what a pool without
 * one shows), the planner's settings merge onto the server's planner
 * settings, and its durations compare by value ("5m" is 300). Prints one
 * line per object,
 * in kubectl's words: "team/research configured".
 *
 * A document that is not that shape (an unknown list, an object without a
 * name, a name twice) is refused before anything is sent. An object the
 * API refuses gets one line naming the file, its line, the object and the
 * API's message; the others are still applied, and the exit code is 1.
 */
#ifndef GPUORCH_CLI_APPLY_H
#define GPUORCH_CLI_APPLY_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "util/yamljson.h"

#define APPLY_FILE_MAX (16u << 20) /* bytes of a document */

/* A document read: the tree and, for YAML, the line of each node. */
struct apply_doc {
    json_t *root;
    struct yamljson yaml; /* empty for JSON read by jansson */
};

/*
 * Reads text[0..len) (borrowed) as YAML (JSON is YAML too; a document that
 * YAML refuses and jansson reads is taken as JSON, without lines), and
 * checks its shape (see above). `name` names the file in messages. 0 and
 * *ret (release with apply_doc_release); GPO_EUSAGE with "NAME:LINE: ..."
 * in err; GPO_ENOMEM.
 */
int apply_doc_parse(const char *text, size_t len, const char *name, struct apply_doc *ret,
                    char *err, size_t errlen);
void apply_doc_release(struct apply_doc *d);

/* The line of the node at `path` ("teams[2]"), 0 when not known. */
long apply_doc_line(const struct apply_doc *d, const char *path);

/*
 * The file's object merged onto the server's: a copy of `current`
 * (borrowed; NULL: none) with each key of `file` (borrowed) set: objects
 * merge key by key, anything else (lists too) is replaced by the file's
 * value, and a null removes the key (nulls deeper in the file's values are
 * left out as well). NULL when out of memory.
 */
json_t *apply_merge(const json_t *current, const json_t *file);

/* Whether `current` already holds everything `file` says: every key of an
 * object (a null: the key absent), lists element by element and of the same
 * length, numbers by value (2 and 2.0), the rest as json_equal. Keys that
 * only `current` has do not matter. */
bool apply_subset(const json_t *file, const json_t *current);

/* `gpuorch apply`: exit codes as cli.h. */
int apply_command(int argc, char **argv);

#endif
