// OUI loads icons with a dynamic import the bundler cannot follow, so the
// icons this UI uses are registered up front (a missing one logs a console
// error, which the browser test treats as a failure).

import { appendIconComponentCache as appendOui } from '@opensearch-project/oui/es/components/icon/icon';
import { appendIconComponentCache as appendEui } from '@opensearch-project/oui/es/eui_components/icon/icon';
import { icon as alert } from '@opensearch-project/oui/es/components/icon/assets/alert';
import { icon as arrowDown } from '@opensearch-project/oui/es/components/icon/assets/arrow_down';
import { icon as arrowUp } from '@opensearch-project/oui/es/components/icon/assets/arrow_up';
import { icon as arrowLeft } from '@opensearch-project/oui/es/components/icon/assets/arrow_left';
import { icon as arrowRight } from '@opensearch-project/oui/es/components/icon/assets/arrow_right';
import { icon as boxesHorizontal } from '@opensearch-project/oui/es/components/icon/assets/boxes_horizontal';
import { icon as calendar } from '@opensearch-project/oui/es/components/icon/assets/calendar';
import { icon as check } from '@opensearch-project/oui/es/components/icon/assets/check';
import { icon as clock } from '@opensearch-project/oui/es/components/icon/assets/clock';
import { icon as cross } from '@opensearch-project/oui/es/components/icon/assets/cross';
import { icon as download } from '@opensearch-project/oui/es/components/icon/assets/download';
import { icon as dot } from '@opensearch-project/oui/es/components/icon/assets/dot';
import { icon as empty } from '@opensearch-project/oui/es/components/icon/assets/empty';
import { icon as eye } from '@opensearch-project/oui/es/components/icon/assets/eye';
import { icon as eyeClosed } from '@opensearch-project/oui/es/components/icon/assets/eye_closed';
import { icon as filter } from '@opensearch-project/oui/es/components/icon/assets/filter';
import { icon as fullScreenExit } from '@opensearch-project/oui/es/components/icon/assets/fullScreenExit';
import { icon as iInCircle } from '@opensearch-project/oui/es/components/icon/assets/iInCircle';
import { icon as layers } from '@opensearch-project/oui/es/components/icon/assets/layers';
import { icon as list } from '@opensearch-project/oui/es/components/icon/assets/list';
import { icon as merge } from '@opensearch-project/oui/es/components/icon/assets/merge';
import { icon as minusInCircle } from '@opensearch-project/oui/es/components/icon/assets/minus_in_circle';
import { icon as plusInCircle } from '@opensearch-project/oui/es/components/icon/assets/plus_in_circle';
import { icon as popout } from '@opensearch-project/oui/es/components/icon/assets/popout';
import { icon as refresh } from '@opensearch-project/oui/es/components/icon/assets/refresh';
import { icon as returnKey } from '@opensearch-project/oui/es/components/icon/assets/return_key';
import { icon as search } from '@opensearch-project/oui/es/components/icon/assets/search';
import { icon as sortUp } from '@opensearch-project/oui/es/components/icon/assets/sort_up';
import { icon as sortDown } from '@opensearch-project/oui/es/components/icon/assets/sort_down';
import { icon as sortable } from '@opensearch-project/oui/es/components/icon/assets/sortable';
import { icon as visArea } from '@opensearch-project/oui/es/components/icon/assets/vis_area';
import { icon as visLine } from '@opensearch-project/oui/es/components/icon/assets/vis_line';
import { icon as questionInCircle } from '@opensearch-project/oui/es/components/icon/assets/question_in_circle';
import { icon as crossInACircleFilled } from '@opensearch-project/oui/es/components/icon/assets/crossInCircleFilled';
import { icon as lock } from '@opensearch-project/oui/es/components/icon/assets/lock';
import { icon as lockOpen } from '@opensearch-project/oui/es/components/icon/assets/lockOpen';
import { icon as plus } from '@opensearch-project/oui/es/components/icon/assets/plus';
import { icon as minus } from '@opensearch-project/oui/es/components/icon/assets/minus';
import { icon as expand } from '@opensearch-project/oui/es/components/icon/assets/expand';

// OUI ships its components twice (Oui* and the Eui* aliases), each with its own
// icon cache: fill both.
export function registerIcons() {
  const icons = {
    lock,
    lockOpen,
    plus,
    minus,
    expand,
    alert,
    arrowDown,
    arrowUp,
    arrowLeft,
    arrowRight,
    boxesHorizontal,
    calendar,
    check,
    clock,
    cross,
    download,
    dot,
    empty,
    eye,
    eyeClosed,
    filter,
    fullScreenExit,
    iInCircle,
    layers,
    list,
    merge,
    minusInCircle,
    plusInCircle,
    popout,
    refresh,
    returnKey,
    search,
    sortUp,
    sortDown,
    sortable,
    visArea,
    visLine,
    questionInCircle,
    crossInACircleFilled,
  };
  appendOui(icons);
  appendEui(icons);
}
