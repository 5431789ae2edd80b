/*
 * banned.h - functions gpuorch code must not call.
 *
 * Every .c file includes it after all its other headers (system headers must
 * come first: they declare these names); tests/tools/check_sources.sh enforces
 * that. Each banned name is then redefined to an undeclared identifier, so a use
 * fails to compile with a message that names the function. Use the bounded alternatives instead:
 *   strcpy, strcat      -> snprintf / memcpy with an explicit length
 *   sprintf, vsprintf   -> snprintf, vsnprintf
 *   gets                -> fgets
 *   atoi, atol, atoll   -> strtol / strtoll with end-pointer and range checks
 *   strtok              -> strtok_r or explicit parsing
 */
#ifndef GPUORCH_BANNED_H
#define GPUORCH_BANNED_H

#define BANNED(func) sorry_##func##_is_a_banned_function

#undef strcpy
#define strcpy(x, y) BANNED(strcpy)
#undef strcat
#define strcat(x, y) BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) BANNED(strncpy)
#undef strncat
#define strncat(x, y, n) BANNED(strncat)
#undef sprintf
#define sprintf(...) BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) BANNED(vsprintf)
#undef gets
#define gets(x) BANNED(gets)
#undef atoi
#define atoi(x) BANNED(atoi)
#undef atol
#define atol(x) BANNED(atol)
#undef atoll
#define atoll(x) BANNED(atoll)
#undef strtok
#define strtok(x, y) BANNED(strtok)

#endif
