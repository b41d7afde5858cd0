# Sourced by the V-advCSE table scripts, after scripts/lib.sh.

# dev_and_transfer MODEL_DIR: STS-B dev (senteval_eval.py --mode dev) and the 7 transfer tasks
# (transfer_test), combined into MODEL_DIR/stsb_dev_transfer.json as Tables 4-5 report them.
dev_and_transfer() {
    evaluate "$1" "$1/sts_dev_results.json" python senteval_eval.py --model_name_or_path "$1" --mode dev \
        --task_set sts --output_json "$1/sts_dev_results.json"
    transfer_test "$1"
    evaluate "$1" "$1/stsb_dev_transfer.json" python -c 'import json, sys
from cse.atomic import write_json
dev, transfer, out = sys.argv[1:]
scores = {"STS-B": json.load(open(dev))["scores"]["STS-B"], "Avg. transfer": json.load(open(transfer))["scores"]["Avg."]}
write_json(out, {"scores": scores})' \
        "$1/sts_dev_results.json" "$1/transfer_test_results.json" "$1/stsb_dev_transfer.json"
}
