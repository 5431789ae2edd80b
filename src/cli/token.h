/*
 * token.h - `gpuorch token`: an API token for a user (admins only).
 *
 *   gpuorch token USER [--label LABEL] [--json]
 *       POST /v1/users/USER/tokens: prints the new token alone on a line (so
 *       that `gpuorch token prometheus > FILE` makes a credentials file), or
 *       {"user", "token"} with --json. The server keeps only its SHA-256:
 *       it is shown once. What the token may do is its user's role
 *       (admin, member, or metrics: GET /metrics and nothing else).
 *
 * Returns an exit code as cli.h says; argv[0] is the command's name.
 */
#ifndef GPUORCH_CLI_TOKEN_H
#define GPUORCH_CLI_TOKEN_H

int token_command(int argc, char **argv);

#endif
