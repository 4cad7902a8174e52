#!/usr/bin/env bash
# Checks the layering of src/ (docs/architecture.md): the folders of src/ include each other
# along a declared order, bottom first, and the include graph between them has no cycle. Every
# `#include "dir/..."` of a .h, .cc, .cu or .cuh file in src/<folder>/ whose dir is a folder of
# src/ is an edge folder -> dir; each must point to a folder declared lower (or the same). Fails
# listing every edge that points up or sideways, every cycle, and every folder not declared.
#   scripts/layer_check.sh            check (CI runs it)
#   scripts/layer_check.sh --graph    also print the folder graph (edges with include counts)
#   scripts/layer_check.sh --objects BUILD_DIR
#                                     also check the calls: every function an object file of a
#                                     folder uses from another folder is defined (strongly) in
#                                     a folder below it (a declaration in a lower layer defined
#                                     in a higher one breaks this); needs nm and a build
# Needs bash, grep and awk only (nm for --objects).
set -euo pipefail
cd "$(dirname "$0")/.."

# Bottom first. A folder may include only the folders before it in this list.
LAYERS=(base reduce topo bootstrap transport proto comm shm loopback prims net tune algo cuda core)

graph=0
objdir=
case "${1:-}" in
  --graph) graph=1 ;;
  --objects) objdir=${2:?"--objects needs the build directory"}/CMakeFiles/chorus_obj.dir/src ;;
  "") ;;
  *) echo "usage: $0 [--graph | --objects BUILD_DIR]" >&2; exit 2 ;;
esac

mapfile -t dirs < <(find src -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)
mapfile -t files < <(find src -mindepth 2 -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \
  -o -name '*.cuh' \) | sort)

# file:line:#include "dir/..." for every quoted include; awk does the rest.
{ grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"/]+/' "${files[@]}" || true; } |
  awk -v layers="${LAYERS[*]}" -v dirs="${dirs[*]}" -v graph="$graph" '
  BEGIN {
    n = split(layers, L, " ")
    for (i = 1; i <= n; ++i) rank[L[i]] = i
    nd = split(dirs, D, " ")
    bad = 0
    for (i = 1; i <= nd; ++i) {
      isdir[D[i]] = 1
      if (!(D[i] in rank)) {
        printf "layer_check: src/%s is not in the declared order (LAYERS in %s)\n", D[i],
               "scripts/layer_check.sh"
        bad = 1
      }
    }
    for (i = 1; i <= n; ++i)
      if (!(L[i] in isdir))
        printf "layer_check: note: declared layer %s has no folder in src/\n", L[i]
  }
  {
    # $0 = src/<from>/<file>:<line>:#include "<to>/..."
    split($0, p, ":")
    file = p[1]; line = p[2]
    split(file, f, "/"); from = f[2]
    inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
    split(inc, t, "/"); to = t[1]
    if (!(to in isdir) || to == from) next   # chorus/ (include/) or the folder itself
    key = from " " to
    if (!(key in count)) { edges[++ne] = key; out[from] = out[from] " " to }
    count[key]++
    if (!(from in rank) || !(to in rank)) next
    if (rank[to] > rank[from]) {
      printf "layer_check: %s:%s includes \"%s\": %s -> %s points up (the order is: %s)\n",
             file, line, inc, from, to, layers
      bad = 1
    }
  }
  # Depth-first search for cycles (reported whatever the declared order says).
  function dfs(u,    k, m, v, i, cyc) {
    color[u] = 1; stack[++sp] = u
    m = split(out[u], adj, " ")
    for (k = 1; k <= m; ++k) {
      v = adj[k]
      if (color[v] == 1) {
        cyc = v
        for (i = sp; i >= 1 && stack[i] != v; --i) cyc = stack[i] " -> " cyc
        cyc = v " -> " cyc
        printf "layer_check: cycle: %s\n", cyc
        bad = 1
      } else if (color[v] == 0) {
        dfs(v)
        m = split(out[u], adj, " ")   # awk arrays are global: re-split after the recursion
      }
    }
    --sp; color[u] = 2
  }
  END {
    for (i = 1; i <= nd; ++i) if (color[D[i]] == 0) dfs(D[i])
    if (graph)
      for (i = 1; i <= ne; ++i) {
        split(edges[i], e, " ")
        printf "%-10s -> %-10s %d\n", e[1], e[2], count[edges[i]]
      }
    if (bad) {
      print "layer_check: FAILED (docs/architecture.md describes the layers)"
      exit 1
    }
    printf "layer_check: %d folders, %d edges, no cycle, every edge points down (%s)\n", nd, ne,
           layers
  }'

[ -n "$objdir" ] || exit 0
[ -d "$objdir" ] || { echo "layer_check: no objects in $objdir (build first)" >&2; exit 1; }
# folder <TAB> object <TAB> D|U <TAB> symbol, for the objects whose source still exists.
for o in "$objdir"/*/*.o; do
  rel=${o#"$objdir"/}
  [ -f "src/${rel%.o}" ] || continue
  d=${rel%%/*}
  nm --defined-only "$o" | awk -v d="$d" -v o="$rel" '$2 ~ /^[TDBR]$/ { print d "\t" o "\tD\t" $3 }'
  nm -u "$o" | awk -v d="$d" -v o="$rel" '{ print d "\t" o "\tU\t" $2 }'
done | awk -F'\t' -v layers="${LAYERS[*]}" '
  BEGIN { n = split(layers, L, " "); for (i = 1; i <= n; ++i) rank[L[i]] = i }
  $3 == "D" { def[$4] = $1 }
  $3 == "U" { use[++nu] = $0 }
  END {
    bad = 0
    for (i = 1; i <= nu; ++i) {
      split(use[i], u, "\t")
      if (!(u[4] in def) || def[u[4]] == u[1]) continue
      if (rank[def[u[4]]] > rank[u[1]]) {
        cmd = "c++filt " u[4]; name = u[4]
        if ((cmd | getline dm) > 0) name = dm
        close(cmd)
        printf "layer_check: src/%s calls %s, defined in %s/ (above %s/)\n", u[2], name, def[u[4]],
               u[1]
        bad = 1
      }
    }
    if (bad) { print "layer_check: FAILED (calls)"; exit 1 }
    print "layer_check: every call between folders points down too (" nu " undefined references read)"
  }'
