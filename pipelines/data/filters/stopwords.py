"""Stop words per language for Gopher's "contains at least N stop words" rule.

The rule asks whether a document reads like running text in the language: real prose is
full of articles, prepositions, conjunctions and auxiliaries, while menus, tables, code and
keyword lists are not. Lists are lowercase; matching is case-sensitive on the tokens (as in
datatrove), which is enough because these words mostly occur mid-sentence.

English keeps Gopher's published eight words (the rule's original form). For the other
languages there is no published list, so each holds the language's most frequent function
words (the tokenizer splits "l'homme" into "l", "'", "homme", hence the elided forms in
French, Italian and Catalan).
"""

from __future__ import annotations

# Gopher (Rae et al. 2021, appendix A1): "the, be, to, of, and, that, have, with".
_EN = "the be to of and that have with"

_ES = """
a al algo algunas algunos ante antes aquel aquella aquellas aquellos aquí así aun aunque
bajo bien cada casi como con contra cual cuales cualquier cuando cuanto de del desde donde
dos durante e el ella ellas ello ellos en entre era eran es esa esas ese eso esos esta estaba
estaban estado estamos estar estas este esto estos está están fue fueron gran ha había
habían han has hasta hay haya he hemos hace hacer la las le les lo los mas me mi mis mismo
mucho muchos muy más nada ni no nos nosotros nuestra nuestras nuestro nuestros o otra otras
otro otros para pero poco por porque pueden puede que quien quienes qué se sea según ser
sería si sido siempre sin sino sobre son su sus también tan tanto te tener tiene tienen
todas todo todos tu tus tú u un una unas uno unos usted ustedes vez y ya yo él
"""

_FR = """
a au aux avec avait avoir c ce cela ces cet cette comme d dans de des donc du elle elles en
entre est et eu il ils j je l la le les leur leurs lui m mais me même mes n ne nous on ont
ou où par pas peut plus pour qu que qui s sa sans se ses si son sont sur ta te tes toi ton
tous tout toute toutes très tu un une vous y à été être
"""

_DE = """
aber als am an auch auf aus bei bin bis bist da damit dann das dass dem den denn der des
dich die dies diese diesem diesen dieser dieses dir doch du durch ein eine einem einen
einer eines er es für hat hatte haben ich ihr ihre im in ist ja jede jeder kann kein keine
man mich mit muss nach nicht noch nur ob oder ohne schon sehr sein seine sich sie sind so
um und uns unter vom von vor war waren was weil wenn werden wie wir wird wurde zu zum zur
zwischen über
"""

_PT = """
a ao aos as até com como da das de dela dele deles depois do dos e ela elas ele eles em
entre era essa esse esta este eu foi for há isso já lhe mais mas me mesmo muito na nas
nem no nos nossa nosso não num numa nós o os ou para pela pelas pelo pelos pode por porque
quando que quem se sem ser seu seus sua suas são só também te tem ter um uma umas uns você
à às é está estão
"""

_IT = """
a ad agli ai al alla alle anche c che chi ci come con da dal dalla dei del della delle
di dove e ed era gli ha hanno i il in io l la le lei li lo loro lui ma mi molto ne nei nel
nella noi non o per perché più può quando quella quello questa questo se si sono su sua
sue sul sulla suo suoi tra tutto tutti un una uno voi è stato essere avere
"""

_CA = """
a al als amb aquest aquesta aquests aquestes com d de del dels el els en entre era és
està fer ha han hi ho i l la les li lo més molt no o on per però perquè pot què que qui
s se seu seus seva seves si sobre són també tot tots un una uns unes va van
"""

STOP_WORDS: dict[str, frozenset[str]] = {
    lang: frozenset(words.split())
    for lang, words in {
        "en": _EN,
        "es": _ES,
        "fr": _FR,
        "de": _DE,
        "pt": _PT,
        "it": _IT,
        "ca": _CA,
    }.items()
}


def stop_words(language: str) -> frozenset[str]:
    """The stop words for an ISO 639-1 code ("es", or "es_ES"-style with a region)."""
    lang = language.lower().replace("-", "_").split("_")[0]
    try:
        return STOP_WORDS[lang]
    except KeyError:
        raise ValueError(
            f"no stop word list for language {language!r}; available: {sorted(STOP_WORDS)}"
        ) from None
