"""Every asset's name, in one place: the key of its Dagster asset and the name of its output
in the store (`DataStore.dir(name)`), so the code location, the stages and the CLI cannot
disagree about one."""

from __future__ import annotations

# the per-shard half, in graph order
RAW_DOCUMENTS = "raw_documents"
CLEAN_DOCUMENTS = "clean_documents"
FILTERED_DOCUMENTS = "filtered_documents"
MINHASH_SIGNATURES = "minhash_signatures"
DEDUPED_DOCUMENTS = "deduped_documents"
TOKEN_SHARDS = "token_shards"
# the whole-corpus joins of the data half
DEDUP_INDEX = "dedup_index"
QUALITY_MODEL = "quality_model"
TOKENIZER = "tokenizer"
EVAL_CONTAMINATION = "eval_contamination"
# training, in chain order
BASE_MODEL = "base_model"
SFT_MODEL = "sft_model"
REWARD_MODEL = "reward_model"
DPO_MODEL = "dpo_model"
PPO_MODEL = "ppo_model"
GRPO_MODEL = "grpo_model"
# evaluation, use and feedback
EVAL_REPORT = "eval_report"
EXPORTED_MODEL = "exported_model"
PROMOTED_MODEL = "promoted_model"
HUMAN_PREFERENCES = "human_preferences"

# the language models of the chain (the reward model scores, it does not write)
LANGUAGE_MODELS = (BASE_MODEL, SFT_MODEL, DPO_MODEL, PPO_MODEL, GRPO_MODEL)
TRAINED = (BASE_MODEL, SFT_MODEL, REWARD_MODEL, DPO_MODEL, PPO_MODEL, GRPO_MODEL)

# the post-training chain: each stage's asset, its objective, and the asset it starts from
CHAIN = {
    SFT_MODEL: ("sft", BASE_MODEL),
    REWARD_MODEL: ("reward", SFT_MODEL),
    DPO_MODEL: ("dpo", SFT_MODEL),
    PPO_MODEL: ("ppo", DPO_MODEL),
    GRPO_MODEL: ("grpo", PPO_MODEL),
}
