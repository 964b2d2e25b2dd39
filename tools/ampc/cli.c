/*
 * tools/ampc/cli.c: error printing and JSON output shared by the subcommands.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "cli.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "ampc/data.h"
#include "ampc/model.h"
#include "ampc/shards.h"

bool cli_quiet_usage;
const char *cli_usage_context;

static void vreport(const char *cmd, const char *fmt, va_list ap) {
  fprintf(stderr, "ampc%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  if (cli_quiet_usage)
    return AMPC_EXIT_USAGE;
  va_list ap;
  va_start(ap, fmt);
  vreport(cmd, fmt, ap);
  va_end(ap);
  if (cli_usage_context)
    fprintf(stderr, "ampc%s%s: (%s)\n", cmd ? " " : "", cmd ? cmd : "", cli_usage_context);
  fprintf(stderr, "Try 'ampc%s%s --help'.\n", cmd ? " " : "", cmd ? cmd : "");
  return AMPC_EXIT_USAGE;
}

int cli_runtime_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(cmd, fmt, ap);
  va_end(ap);
  return AMPC_EXIT_ERROR;
}

/* out = realpath(dirname(p)) + "/" + basename(p); false when the
 * directory does not resolve */
static bool canon(const char *p, char *out, size_t cap) {
  char dir[PATH_MAX], res[PATH_MAX];
  const char *slash = strrchr(p, '/');
  const char *base = slash ? slash + 1 : p;
  if (slash) {
    const size_t n = slash == p ? 1 : (size_t)(slash - p);
    if (n >= sizeof dir)
      return false;
    memcpy(dir, p, n);
    dir[n] = '\0';
  } else {
    dir[0] = '.', dir[1] = '\0';
  }
  if (!realpath(dir, res))
    return false;
  return snprintf(out, cap, "%s/%s", res, base) < (int)cap;
}

/* out = p with its symbolic links followed, each relative one from its
 * link's directory, at most 40 deep: a dangling link names the file that
 * writing through it would create. false when a link cannot be read or the
 * path is too long. */
static bool follow_links(const char *p, char *out, size_t cap) {
  char cur[PATH_MAX], target[PATH_MAX];
  if (snprintf(cur, sizeof cur, "%s", p) >= (int)sizeof cur)
    return false;
  for (int depth = 0;; depth++) {
    struct stat st;
    if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode))
      break;
    if (depth == 40) /* a loop (ELOOP): no file to compare */
      return false;
    const ssize_t n = readlink(cur, target, sizeof target - 1);
    if (n < 0)
      return false;
    target[n] = '\0';
    const char *slash = strrchr(cur, '/');
    if (target[0] == '/' || !slash) {
      memcpy(cur, target, (size_t)n + 1);
    } else { /* relative: from the link's directory */
      const size_t d = (size_t)(slash - cur) + 1;
      if (d + (size_t)n + 1 > sizeof cur)
        return false;
      memcpy(cur + d, target, (size_t)n + 1);
    }
  }
  return snprintf(out, cap, "%s", cur) < (int)cap;
}

bool cli_same_file(const char *a, const char *b) {
  if (!a || !b)
    return false;
  if (!strcmp(a, b))
    return true;
  struct stat sa, sb;
  const bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
  if (ea && eb)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea || eb) /* one exists, the other not: different files */
    return false;
  /* neither exists (yet): the same name in the same directory, once
   * dangling links are followed to the files they would create */
  char fa[PATH_MAX], fb[PATH_MAX], ca[PATH_MAX + 256], cb[PATH_MAX + 256];
  if (!follow_links(a, fa, sizeof fa) || !follow_links(b, fb, sizeof fb))
    return false;
  return canon(fa, ca, sizeof ca) && canon(fb, cb, sizeof cb) && !strcmp(ca, cb);
}

int cli_parse_recompute(const char *cmd, const char *v, bool *keep) {
  if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
    return cli_usage_error(cmd, "--recompute: expected on or off, got '%s'", v);
  *keep = strcmp(v, "off") == 0;
  return 0;
}

int cli_parse_device(const char *cmd, const char *v, bool with_tests, ampc_device *dev) {
  ampc_device d;
  if (ampc_device_parse(v, &d) == AMPC_OK && (with_tests || !ampc_device_desc_get(d)->test_only)) {
    *dev = d;
    return 0;
  }
  char list[128];
  ampc_device_list(list, sizeof list, ", ", with_tests);
  char *last = strrchr(list, ','); /* "a, b, c" -> "a, b or c" */
  char said[160];
  if (last)
    snprintf(said, sizeof said, "%.*s or %s", (int)(last - list), list, last + 2);
  else
    snprintf(said, sizeof said, "%s", list);
  return cli_usage_error(cmd, "--device: expected %s, got '%s'", said, v);
}

int cli_parse_attention_cast(const char *cmd, const char *v, bool *on) {
  if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
    return cli_usage_error(cmd, "--attention-cast: expected on or off, got '%s'", v);
  *on = strcmp(v, "on") == 0;
  return 0;
}

int cli_next_option(const char *cmd, int argc, char **argv, int *i, bool (*is_flag)(const char *),
                    char *name, size_t cap, const char **value) {
  const char *arg = argv[*i];
  if (strncmp(arg, "--", 2) != 0 || !arg[2])
    return cli_usage_error(cmd, "unexpected argument '%s'", arg);
  const char *eq = strchr(arg + 2, '=');
  const size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
  if (len >= cap)
    return cli_usage_error(cmd, "unknown option %s", arg);
  memcpy(name, arg + 2, len);
  name[len] = '\0';
  *value = NULL;
  if (is_flag && is_flag(name)) {
    if (eq)
      return cli_usage_error(cmd, "--%s takes no value", name);
    return 0;
  }
  if (eq) {
    *value = eq + 1;
    return 0;
  }
  if (*i + 1 >= argc)
    return cli_usage_error(cmd, "--%s needs a value, or is not an option of ampc %s", name, cmd);
  if (!strncmp(argv[*i + 1], "--", 2) && argv[*i + 1][2]) /* "--model --json" */
    return cli_usage_error(cmd, "--%s needs a value (got the flag %s)", name, argv[*i + 1]);
  *value = argv[++*i];
  return 0;
}

int cli_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

int cli_print_json(const char *cmd, cJSON *obj) {
  char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
  cJSON_Delete(obj);
  if (!s)
    return cli_runtime_error(cmd, "out of memory while writing JSON");
  puts(s);
  cJSON_free(s);
  return fflush(stdout) == 0 ? AMPC_EXIT_OK : cli_runtime_error(cmd, "cannot write to stdout");
}

bool cli_is_pack(const char *name) {
  struct stat st;
  if (!strcmp(name, "emoji") || !strncmp(name, "fashion-mnist", 13)) /* the bundled names */
    return false;
  if (stat(name, &st) != 0)
    return false;
  if (S_ISDIR(st.st_mode)) /* only packs are folders (a missing manifest says so) */
    return true;
  const size_t n = strlen(name);
  return n >= 5 && strcmp(name + n - 5, ".json") == 0;
}

int cli_load_data(const char *cmd, const char *name, ampc_dataset *d) {
  ampc_status st;
  if (cli_is_pack(name)) { /* a packed dataset: its val split (and its shapes) */
    ampc_shards *sh;
    st = ampc_shards_open(&sh, name, false, false);
    if (st == AMPC_OK) {
      st = ampc_shards_val_dataset(sh, CLI_PACK_EVAL_SAMPLES, d);
      ampc_shards_close(sh);
    }
  } else if (strcmp(name, "emoji") == 0)
    st = ampc_dataset_load_default(d);
  else if (strcmp(name, "fashion-mnist") == 0)
    st = ampc_fashion_mnist_load("/usr/share/datasets/fashion-mnist", d);
  else if (strncmp(name, "fashion-mnist:", 14) == 0)
    st = ampc_fashion_mnist_load(name + 14, d);
  else
    st = ampc_dataset_load(name, d);
  if (st != AMPC_OK)
    return cli_runtime_error(cmd, "%s", ampc_last_error());
  return 0;
}

int cli_hold_out_style(const char *cmd, const char *style, ampc_dataset *d) {
  const int k = ampc_dataset_find_style(d, style);
  if (k < 0) {
    char names[256] = "";
    const int n = d->style_names ? d->n_styles : (d->tokens ? 2 : 0);
    for (int s = 0; s < n; s++) {
      const size_t used = strlen(names);
      snprintf(names + used, sizeof names - used, "%s%s", s ? ", " : "",
               ampc_dataset_style_name(d, s));
    }
    return cli_usage_error(cmd, "--hold-out-style: the data has no style '%s' (its styles: %s)",
                           style, n ? names : "none, it is image-only");
  }
  if (ampc_dataset_hold_out_style(d, k) != AMPC_OK)
    return cli_usage_error(cmd, "--hold-out-style: %s", ampc_last_error());
  return 0;
}

int cli_unknown_model(const char *cmd, const char *name, bool with_mlp) {
  char list[192];
  ampc_mmodel_list(list, sizeof list, 0, 0, 0, -1);
  return cli_usage_error(cmd, "--model: unknown model '%s' (available: %s%s)", name, list,
                         with_mlp ? ", mlp" : "");
}
