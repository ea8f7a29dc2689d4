"""Guard names of chained sources (`L['x'][0].attr`): spelled once per source, so wrapping a
big nested input (a list of all the process's objects) is linear in its size."""

from kiln.frontend.source import AttrSource, GetItemSource, LocalSource


def test_a_chained_name_is_made_once():
    source = LocalSource("x")
    chain = []
    for k in range(300):
        source = GetItemSource(source, k) if k % 2 else AttrSource(source, f"a{k}")
        chain.append(source)
        source.name()  # named as it is made, as the builder names each source it wraps
    text = chain[-1].name()
    assert text.startswith("x.a0[1].a2[3]") and text.endswith("[299]")
    assert chain[-1].name() is text  # the same string: not spelled again
    assert chain[10].name() is chain[10].name()
    # the cache is no field: equal chains are equal and hash alike
    again = GetItemSource(chain[-2], 299)
    assert again == chain[-1] and hash(again) == hash(chain[-1])
    assert again.name() == text
