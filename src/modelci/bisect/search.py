"""The search itself, without git or runs: (K+1)-ary bisection over a commit graph, with skips.

The candidates are the commits that may be the first bad one: ancestors of the bad end that are not ancestors
of a good commit (as `git bisect` keeps them). A commit's weight is how many candidates it reaches (itself
included). A bad probe keeps only what it reaches; a good probe removes everything it reaches. One probe aims at
weight N/2, K probes at the weights jN/(K+1); an ordered list of releases is the graph where each has one parent.

Untestable probes are skipped, as `git bisect skip` does. The next probe is the commit nearest the target point
that best splits the commits still testable; inside a run of broken commits it moves 1, 2, 4, 8, ... places from
the midpoint instead: a run of failed builds must not turn the bisect into a linear walk.

Ancestor sets are Python ints used as bitsets, so a round over thousands of commits costs a few milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERDICTS = ("good", "bad", "skip")


@dataclass
class Search:
    """The state of one bisection: candidates, skipped commits and what each probe said."""

    order: list[str]  # every commit of the range, parents before children
    bad: str
    #: commit -> bitset of the commits it reaches (itself included), over `order`
    reach: dict[str, int] = field(default_factory=dict)
    candidates: int = 0
    skipped: set[str] = field(default_factory=set)
    verdicts: dict[str, str] = field(default_factory=dict)
    inconsistent: list[str] = field(default_factory=list)

    @classmethod
    def over(cls, graph: dict[str, list[str]], bad: str) -> Search:
        """A search over `graph` (commit -> parents inside the range, parents first) whose bad end is `bad`."""
        order = list(graph)
        if bad not in graph:
            raise ValueError(f"the bad end {bad} is not in the graph")
        bit = {sha: 1 << i for i, sha in enumerate(order)}
        reach: dict[str, int] = {}
        for sha in order:
            mask = bit[sha]
            for parent in graph[sha]:
                mask |= reach[parent]
            reach[sha] = mask
        search = cls(order=order, bad=bad, reach=reach)
        search.candidates = reach[bad]
        return search

    @classmethod
    def linear(cls, items: list[str]) -> Search:
        """A search over an ordered list (releases): the first item is the first after the good end."""
        return cls.over({item: items[i - 1:i] for i, item in enumerate(items)}, items[-1])

    # -- state ----------------------------------------------------------------------------------------------

    def remaining(self) -> list[str]:
        """The candidates, in graph order; the last one is the current bad commit."""
        return [sha for i, sha in enumerate(self.order) if self.candidates >> i & 1]

    def weight(self, sha: str) -> int:
        """How many candidates `sha` reaches."""
        return (self.reach[sha] & self.candidates).bit_count()

    @property
    def done(self) -> bool:
        """True when one candidate is left, or every candidate but the bad end is skipped."""
        return not self.testable()

    def testable(self) -> list[str]:
        """Candidates that may still be probed: neither the bad end nor skipped."""
        return [sha for sha in self.remaining() if sha != self.bad and sha not in self.skipped]

    @property
    def culprit(self) -> str | None:
        """The first bad commit, once it is the only candidate."""
        left = self.remaining()
        return left[0] if len(left) == 1 else None

    # -- choosing probes ------------------------------------------------------------------------------------

    def next_probes(self, jobs: int = 1) -> list[str]:
        """Up to `jobs` commits to test at once, near the weights N/(K+1), 2N/(K+1), ...; [] when done."""
        testable = self.testable()
        if not testable:
            return []
        n = self.candidates.bit_count()
        live = self.candidates & ~self._mask(self.skipped)
        by_weight = sorted(((self.weight(sha), i, sha) for i, sha in enumerate(self.order)
                            if self.candidates >> i & 1 and sha != self.bad))
        ranked = [sha for _, _, sha in by_weight]
        weights = [w for w, _, _ in by_weight]
        # what a probe would leave, counting only commits that can still be tested: a skipped one never narrows
        # the range, so between two probes at the same distance the one that halves the others saves a build
        live_weights = [(self.reach[sha] & live).bit_count() for sha in ranked]
        k = min(jobs, len(testable))
        chosen: list[str] = []
        for j in range(1, k + 1):
            goal = j * n / (k + 1)
            start = min(range(len(ranked)), key=lambda i: (abs(weights[i] - goal), i))
            pick = self._near(ranked, start, chosen, live_weights, j * live.bit_count() / (k + 1))
            if pick is not None:
                chosen.append(pick)
        return chosen

    def _mask(self, shas: set[str]) -> int:
        mask = 0
        for i, sha in enumerate(self.order):
            if sha in shas:
                mask |= 1 << i
        return mask

    def _near(self, ranked: list[str], start: int, chosen: list[str], live_weights: list[int],
              live_goal: float) -> str | None:
        """The probe for one target point.

        Normally the usable commit that best splits the commits still testable: a skipped commit can never narrow
        the range, so balancing the others is what keeps the builds at ceil(log2 N) + skips. But when that commit
        sits next to two or more skipped ones in a row, it is probably inside a run of broken commits; then the
        probe moves 1, 2, 4, 8, ... places from the midpoint `start` (the side nearer the goal first), so the run is
        left in logarithmically many probes instead of walked through.
        """
        usable = [i for i, sha in enumerate(ranked) if sha not in self.skipped and sha not in chosen]
        if not usable:
            return None
        best = min(usable, key=lambda i: (abs(live_weights[i] - live_goal), i))
        if self._skipped_run(ranked, best) < 2:
            return ranked[best]
        allowed = set(usable)
        distance = 0
        while distance < 2 * len(ranked):
            sides = [i for i in {start + distance, start - distance} if i in allowed]
            if sides:
                return ranked[min(sides, key=lambda i: (abs(live_weights[i] - live_goal), i))]
            distance = distance * 2 or 1
        return ranked[best]

    def _skipped_run(self, ranked: list[str], index: int) -> int:
        """The longest run of skipped commits right next to `index`, on either side."""
        longest = 0
        for step in (-1, 1):
            run, i = 0, index + step
            while 0 <= i < len(ranked) and ranked[i] in self.skipped:
                run, i = run + 1, i + step
            longest = max(longest, run)
        return longest

    # -- recording ------------------------------------------------------------------------------------------

    def record(self, outcomes: dict[str, str]) -> None:
        """Apply the verdicts of one round: bad ones first (they shrink the range), then good ones.

        A good commit that a bad one of the same round reaches contradicts it (a flaky check or a regression that
        comes and goes); it is listed in `inconsistent` and otherwise ignored.
        """
        for sha, verdict in outcomes.items():
            if verdict not in VERDICTS:
                raise ValueError(f"verdict {verdict!r} is not one of {VERDICTS}")
            self.verdicts[sha] = verdict
        bads = [sha for sha, v in outcomes.items() if v == "bad"]
        if bads:
            # on a line the lowest bad one holds all the others' information; on a graph two bad commits on
            # separate branches may have separate first bad commits, so follow the one that leaves least to search
            lowest = min(bads, key=lambda sha: (self.weight(sha), self.order.index(sha)))
            self.candidates &= self.reach[lowest]
            self.bad = lowest
        bad_bits = 0
        for sha, verdict in self.verdicts.items():
            if verdict == "bad":
                bad_bits |= 1 << self.order.index(sha)
        for sha, verdict in outcomes.items():
            if verdict == "skip":
                self.skipped.add(sha)
            elif verdict == "good":
                if self.reach[sha] & bad_bits:
                    self.inconsistent.append(sha)  # good, yet it contains a bad commit
                else:
                    self.candidates &= ~self.reach[sha]
