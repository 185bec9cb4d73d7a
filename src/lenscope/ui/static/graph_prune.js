// lenscope ui: an attribution graph pruned again in the page, by lenscope's rule (attribution/influence.py `prune`,
// which attribution/reprune.py `prune_file` applies to a graph file): the same steps on the file's links, sparse.
"use strict";

var GraphPrune = (function () {
  var MAX_ITER = 1000;

  // |w| of each link over the sum of |w| into its target (influence.normalize_rows), for the links `use` allows
  function normalized(n, links, use) {
    var sums = new Float64Array(n), out = new Float64Array(links.length);
    links.forEach(function (l, i) { if (use(i)) { sums[l[1]] += Math.abs(l[2]); } });
    links.forEach(function (l, i) { out[i] = use(i) ? Math.abs(l[2]) / Math.max(sums[l[1]], 1e-10) : 0; });
    return out;
  }

  // weights @ (A + A^2 + ...): each node's influence on the weighted targets (influence.total_influence)
  function totalInfluence(n, links, norm, weights) {
    function step(vector) {
      var next = new Float64Array(n);
      links.forEach(function (l, i) { if (norm[i]) { next[l[0]] += vector[l[1]] * norm[i]; } });
      return next;
    }
    var current = step(weights), influence = Float64Array.from(current);
    for (var iter = 0; iter < MAX_ITER; iter++) {
      if (!current.some(function (v) { return v !== 0; })) { return influence; }
      current = step(current);
      for (var i = 0; i < n; i++) { influence[i] += current[i]; }
    }
    throw new Error("influence did not converge in " + MAX_ITER + " steps: the graph has a cycle");
  }

  // The score above which the largest scores add up to `fraction` of the total (influence.threshold_for), over
  // `values` (the nonzero scores) and `zeros` more scores of zero; a fraction of 1 keeps every score.
  function thresholdFor(values, zeros, fraction) {
    var ordered = Array.prototype.slice.call(values).sort(function (a, b) { return b - a; });
    var last = zeros > 0 || !ordered.length ? 0 : ordered[ordered.length - 1];
    if (fraction >= 1) { return last; }
    var total = 0, run = 0, i;
    for (i = 0; i < ordered.length; i++) { total += ordered[i]; }
    for (i = 0; i < ordered.length; i++) {
      run += ordered[i];
      if (run / Math.max(total, 1e-30) >= fraction) { return ordered[i]; }
    }
    return last;
  }

  function split(scores) {
    var nonzero = [], zeros = 0;
    scores.forEach(function (v) { if (v !== 0) { nonzero.push(v); } else { zeros += 1; } });
    return {nonzero: nonzero, zeros: zeros};
  }

  // Features and errors without a kept way out (features: or in) dropped until nothing changes.
  function dropDeadEnds(nodes, links, nodeMask, edgeMask) {
    for (;;) {
      var out = new Uint8Array(nodes.length), into = new Uint8Array(nodes.length), changed = false;
      links.forEach(function (l, i) {
        if (edgeMask[i] && nodeMask[l[0]] && nodeMask[l[1]]) { out[l[0]] = 1; into[l[1]] = 1; }
      });
      nodes.forEach(function (node, i) {
        var inner = node.kind === "feature" || node.kind === "error";
        if (nodeMask[i] && inner && (!out[i] || (node.kind === "feature" && !into[i]))) {
          nodeMask[i] = 0;
          changed = true;
        }
      });
      if (!changed) { return; }
    }
  }

  // The graph {nodes, links: [source, target, weight]} pruned at the two thresholds: {nodes: kept flags, links:
  // kept link indices, influence: each node's influence on the logits over the file's links}.
  function prune(graph, nodeThreshold, edgeThreshold) {
    var nodes = graph.nodes, links = graph.links, n = nodes.length;
    var weights = Float64Array.from(nodes, function (node) { return node.kind === "logit" ? node.prob || 0 : 0; });
    var influence = totalInfluence(n, links, normalized(n, links, function () { return true; }), weights);
    var parts = split(influence), cut = thresholdFor(parts.nonzero, parts.zeros, nodeThreshold);
    var nodeMask = Uint8Array.from(nodes, function (node, i) {
      return node.kind === "token" || node.kind === "logit" || influence[i] >= cut ? 1 : 0;
    });
    var inKept = function (i) { return nodeMask[links[i][0]] && nodeMask[links[i][1]]; };
    var norm = normalized(n, links, inKept);
    var reach = totalInfluence(n, links, norm, weights);
    var scores = Float64Array.from(links, function (l, i) { return norm[i] * (reach[l[1]] + weights[l[1]]); });
    var positive = Array.prototype.filter.call(scores, function (v) { return v !== 0; });
    var edgeCut = thresholdFor(positive, n * n - positive.length, edgeThreshold);
    var edgeMask;
    if (edgeCut === 0) {  // every pair of nodes kept as an edge, absent ones included: nothing is a dead end
      edgeMask = new Uint8Array(links.length).fill(1);
    } else {
      edgeMask = Uint8Array.from(scores, function (v) { return v >= edgeCut ? 1 : 0; });
      dropDeadEnds(nodes, links, nodeMask, edgeMask);
    }
    var kept = [], touched = new Uint8Array(n);
    links.forEach(function (l, i) {
      if (edgeMask[i] && l[2] !== 0 && nodeMask[l[0]] && nodeMask[l[1]]) {
        kept.push(i);
        touched[l[0]] = 1;
        touched[l[1]] = 1;
      }
    });
    var shown = Uint8Array.from(nodes, function (node, i) {
      return nodeMask[i] && (touched[i] || node.kind === "token" || node.kind === "logit") ? 1 : 0;
    });
    return {nodes: shown, links: kept, influence: influence};
  }

  return {prune: prune, totalInfluence: totalInfluence, thresholdFor: thresholdFor};
})();
