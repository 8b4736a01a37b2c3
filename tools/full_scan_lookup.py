"""Prompt lookup by its definition, a full scan of the text: the reference drafters.py's index must agree with.

tests/test_drafters.py checks PromptLookup against it at every step of growing texts; tools/small_parts.py times
the two. It holds an answer to EXERCISES.md's step 13 (a slow one), so a student copy leaves it out
(course/exercises.py's TEACHER_ONLY); it lives with the tools because a tool may not import a test module.
"""


def brute_force_lookup(x, k, max_ngram=None, min_ngram=1):
    """The definition, by a full scan: (the k tokens that followed the most recent earlier occurrence of x's
    longest suffix that occurred earlier, counted as at most max_ngram long; that length). Past x's end the
    copy goes on with the tokens it copied."""
    longest = len(x) - 1 if max_ngram is None else min(max_ngram, len(x) - 1)
    for n in range(longest, min_ngram - 1, -1):
        for end in range(len(x) - 1, n - 1, -1):  # ends before len(x): an occurrence with a token after it
            if x[end - n : end] == x[len(x) - n :]:
                text = list(x)
                for i in range(k):
                    text.append(text[end + i])
                return text[len(x) :], n
    return [], 0
